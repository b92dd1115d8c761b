"""T5 and mT5 conversion: the .nemo archive of a T5Model (standalone.py), the Hugging Face export and the job.

- a randomly initialised tiny T5 (both styles) saved into a .nemo and loaded back computes the same logits, with
  its WordPiece vocabulary (T5) or SentencePiece model (mT5) packed in;
- the Hugging Face export of a random T5 in the exportable style, for every activation, computes megatron's logits
  (T5ForConditionalGeneration; MT5ForConditionalGeneration for a SentencePiece vocabulary), and its tokenizer
  encodes text to the same ids; the family defaults are refused with every reason;
- real runs (the launcher writes the configs, the programs run as their scripts do): a tiny T5 in the exportable
  style trained at TP=2 -> .nemo TP=1 and Hugging Face, and -> .nemo TP=2 whose shards are megatron's own split;
  a tiny mT5 with the family defaults trained at TP=1 -> .nemo TP=2 with its SentencePiece model, no Hugging Face
  folder and the reasons in the log. Each gives the training checkpoint's logits (tests/jobs/checkpoint_logits.py:
  the trainer's code, not the converter's).
"""

import tarfile

import pytest

from tests.conftest import require_module

torch = require_module("torch")

transformers = require_module("transformers")

from nemo_launcher.jobs.common.tokenizer import load_tokenizer  # noqa: E402
from nemo_launcher.jobs.core.conversion import HFExportError  # noqa: E402
from nemo_launcher.jobs.core.shards import split_state_dict  # noqa: E402
from nemo_launcher.jobs.t5 import hf_export, standalone  # noqa: E402
from nemo_launcher.jobs.t5.shards import t5_shard_layout  # noqa: E402
from tests.jobs.data_support import tiny_pile_texts, train_wordpiece_vocab  # noqa: E402
from tests.jobs.pipeline_support import SHORT_TRAINING, plan_pipeline, reference_logits, run_job  # noqa: E402
from tests.jobs.t5_models import (  # noqa: E402
    STYLES,
    megatron_logits,
    model_section,
    random_model,
    sample_batch,
    sentencepiece_tokenizer,
    wordpiece_tokenizer,
)

TOLERANCE = 1e-5  # max |logit difference| in fp32


@pytest.fixture(scope="module")
def t5_vocab(tmp_path_factory):
    """A cased WordPiece vocab.txt learned from the tiny Pile (T5's tokenizer)."""
    return train_wordpiece_vocab(tmp_path_factory.mktemp("t5_vocab") / "vocab.txt", lower_case=False, vocab_size=800)


@pytest.fixture(scope="module")
def mt5_model(tmp_path_factory):
    """A SentencePiece model shaped like mT5's released one: pad 0, eos 1, unk 2, no bos, no sentinels."""
    import sentencepiece

    from tests.jobs.data_support import tiny_pile_texts

    folder = tmp_path_factory.mktemp("mt5_sp")
    text = folder / "text.txt"
    text.write_text("\n".join(tiny_pile_texts()[:120]), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(folder / "mt5"),
        vocab_size=500,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return str(folder / "mt5.model")


def _tokenizer_section(kind, t5_vocab, mt5_model):
    return wordpiece_tokenizer(t5_vocab) if kind == "t5" else sentencepiece_tokenizer(mt5_model)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", ("t5", "mt5"))
def test_nemo_round_trip_gives_identical_logits(tmp_path, t5_vocab, mt5_model, kind, style):
    section = model_section(style, _tokenizer_section(kind, t5_vocab, mt5_model))
    vocab_size = 1024
    model = random_model(section, vocab_size)
    path = standalone.save_t5_nemo(tmp_path / f"megatron_{kind}.nemo", section, model)

    packed = "tokenizer/vocab.txt" if kind == "t5" else "tokenizer/mt5.model"
    with tarfile.open(path) as archive:
        assert set(archive.getnames()) == {"model_config.yaml", "model_weights.pt", packed}
    config, state = standalone.load_t5_nemo(path)
    source = t5_vocab if kind == "t5" else mt5_model
    packed_key = "vocab_file" if kind == "t5" else "model"
    assert open(config["tokenizer"][packed_key], "rb").read() == open(source, "rb").read()
    for key, value in model.state_dict().items():
        if not key.endswith("_extra_state"):
            assert torch.equal(state[key], value), key

    loaded, tokenizer = standalone.load_t5_from_nemo(path)
    assert len(tokenizer.additional_special_tokens_ids) == 10  # the sentinels come back with the vocabulary
    batch = sample_batch(vocab_size)
    expected = megatron_logits(model, *batch)
    assert (megatron_logits(loaded, *batch) - expected).abs().max().item() == 0.0
    assert expected.std() > 0.1  # a real function of the weights, not a constant


@pytest.mark.parametrize("style", STYLES)
def test_tp_rules_name_every_parameter(t5_vocab, style):
    """Split over TP=2 and merged back, every weight of either style is what it was (megatron's own TP=2 split is
    checked against these rules on a real checkpoint below)."""
    from nemo_launcher.jobs.core.shards import merge_shards

    section = model_section(style, wordpiece_tokenizer(t5_vocab), activation="geglu")
    full = standalone.host_state_dict(random_model(section, vocab_size=1024))
    layout = t5_shard_layout(section, 2)
    shards = {(rank, 0): split_state_dict(full, layout, rank, 0) for rank in range(2)}
    assert (
        shards[(1, 0)]["decoder.layers.0.mlp.linear_fc1.weight"].shape[0] == section["ffn_hidden_size"]
    )  # gate + up halves
    merged = merge_shards(shards, layout)
    assert sorted(merged) == sorted(full) and all(torch.equal(merged[key], full[key]) for key in full)


def _tokenizer(section):
    spec = section["tokenizer"]
    return load_tokenizer(
        **{key: spec.get(key) for key in ("library", "type", "model", "vocab_file")},
        num_sentinel_tokens=spec["num_sentinel_tokens"],
    )


def _hf_logits(folder, encoder_ids, decoder_ids, encoder_mask):
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=encoder_ids, attention_mask=encoder_mask, decoder_input_ids=decoder_ids).logits
    return type(model).__name__, logits


@pytest.mark.parametrize("activation", sorted(hf_export.FEED_FORWARD))
def test_hf_export_computes_megatrons_logits(tmp_path, t5_vocab, activation):
    # init 0.05: logits of a few units, where fp32 rounding stays below the tolerance
    section = model_section("hf", wordpiece_tokenizer(t5_vocab), activation=activation, init_method_std=0.05)
    tokenizer = _tokenizer(section)
    model = random_model(section, vocab_size=1024)
    assert (
        hf_export.export_hf(section, standalone.host_state_dict(model), tmp_path, tokenizer)
        == "T5ForConditionalGeneration"
    )
    hf_export.write_hf_tokenizer(section["tokenizer"], tokenizer, tmp_path, max_length=32)

    batch = sample_batch(tokenizer.vocab_size)
    expected = megatron_logits(model, *batch)[..., : tokenizer.vocab_size]
    name, logits = _hf_logits(tmp_path, *batch)
    assert name == "T5ForConditionalGeneration"
    assert (logits - expected).abs().max().item() < TOLERANCE
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in tiny_pile_texts()[:20]:
        assert hf_tokenizer(text, add_special_tokens=False).input_ids == tokenizer.encode(text)
    assert hf_tokenizer.convert_tokens_to_ids("<extra_id_0>") == tokenizer.additional_special_tokens_ids[0]
    assert hf_tokenizer.pad_token_id == tokenizer.pad and hf_tokenizer.eos_token_id == tokenizer.eos


def test_mt5_hf_export_computes_megatrons_logits(tmp_path, mt5_model):
    section = model_section("hf", sentencepiece_tokenizer(mt5_model), init_method_std=0.05)
    tokenizer = _tokenizer(section)
    model = random_model(section, vocab_size=640)
    hf_export.export_hf(section, standalone.host_state_dict(model), tmp_path, tokenizer)
    batch = sample_batch(tokenizer.vocab_size)
    name, logits = _hf_logits(tmp_path, *batch)
    assert name == "MT5ForConditionalGeneration"
    assert (logits - megatron_logits(model, *batch)[..., : tokenizer.vocab_size]).abs().max().item() < TOLERANCE


def test_family_defaults_have_no_hugging_face_form(t5_vocab):
    section = model_section("family", wordpiece_tokenizer(t5_vocab))
    with pytest.raises(HFExportError) as refused:
        hf_export.hf_architecture(section)
    for reason in (
        "position_embedding_type is learned_absolute",
        "normalization is layernorm",
        "bias is true",
        "share_embeddings_and_output_weights is true",
    ):
        assert reason in str(refused.value)
    # One blocker alone is named alone.
    with pytest.raises(HFExportError, match=r"exactly: bias is true \(T5's linear layers have no biases"):
        hf_export.hf_architecture(model_section("hf", wordpiece_tokenizer(t5_vocab), bias=True))


# ---- real runs ---------------------------------------------------------------------------------------------

TRAIN, CONVERT = "nemo_launcher.jobs.t5.train", "nemo_launcher.jobs.t5.convert"
SHORT_T5 = [*SHORT_TRAINING, "training.model.data.seq_length_dec=16"]
EXPORTABLE = [
    "training.model.position_embedding_type=relative",
    "training.model.normalization=rmsnorm",
    "training.model.bias=false",
    "training.model.share_embeddings_and_output_weights=false",
    "training.model.relative_attention_num_buckets=8",
    "training.model.relative_attention_max_distance=20",
]


def _prepare_data(choice, folder, steps, monkeypatch):
    """The tiny data preparation's steps, as its jobs run them: what the tiny training config reads."""
    from tests.jobs.data.test_data_steps import resolved

    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    folder.mkdir(parents=True, exist_ok=True)
    config = str(resolved(choice, folder, "progress=false"))
    for step in steps:
        step.main(["--config", config])
    return folder / "data"


@pytest.fixture(scope="module")
def t5_tp2(tmp_path_factory, tiny_data):
    """t5/tiny in the exportable style, trained at TP=2 for 4 steps, converted to TP=1 (+ Hugging Face) and TP=2."""
    work, data = tmp_path_factory.mktemp("t5_tp2"), tiny_data("t5/tiny_pile")
    common = [
        "training=t5/tiny",
        "conversion=t5/convert_t5",
        *SHORT_T5,
        *EXPORTABLE,
        "training.trainer.devices=2",
        "training.model.tensor_model_parallel_size=2",
    ]
    run = plan_pipeline(work, ["stages=[training,conversion]", *common, "conversion.hf.mode=required"], data)
    run_job(run.configs["training"], TRAIN, processes=2)
    log = run_job(run.configs["conversion"], CONVERT).stdout
    resharded = plan_pipeline(
        work,
        [
            "stages=[conversion]",
            *common,
            "conversion.model.tensor_model_parallel_size=2",
            "conversion.run.nemo_file_name=megatron_t5_tp2.nemo",
            "conversion.hf.mode=off",
        ],
        data,
    )
    run_job(resharded.configs["conversion"], CONVERT, processes=2)
    return run, log


@pytest.fixture(scope="module")
def mt5_tp1(tmp_path_factory):
    """mt5/tiny with the family defaults, trained at TP=1 for 4 steps, converted to TP=2 (hf.mode auto)."""
    from nemo_launcher.jobs.data import download, prepare, preprocess, setup_preprocess, train_tokenizer

    work = tmp_path_factory.mktemp("mt5_tp1")
    with pytest.MonkeyPatch.context() as monkeypatch:
        data = _prepare_data(
            "mt5/tiny_mc4", work, (prepare, download, setup_preprocess, train_tokenizer, preprocess), monkeypatch
        )
    common = ["training=mt5/tiny", "conversion=mt5/convert_mt5", *SHORT_T5]
    run = plan_pipeline(
        work, ["stages=[training,conversion]", *common, "conversion.model.tensor_model_parallel_size=2"], data
    )
    run_job(run.configs["training"], TRAIN)
    log = run_job(run.configs["conversion"], CONVERT, processes=2).stdout
    return run, log


def _reference(run, name, tmp_path, tokenizer, processes):
    """The checkpoint's logits for two encoder inputs (the second padded) and decoder inputs, as the trainer
    computes them."""
    texts = ["The licensee may copy and distribute the Program.", "Each time you redistribute the Program"]
    encoded = [tokenizer.encode(text)[:12] for text in texts]
    width = max(len(ids) for ids in encoded)
    encoder = torch.tensor([ids + [tokenizer.pad] * (width - len(ids)) for ids in encoded])
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in encoded])
    pieces = tokenizer.encode(" ".join(texts))
    decoder = torch.tensor([[tokenizer.bos] + pieces[0:6], [tokenizer.bos] + pieces[6:12]])
    inputs = {"encoder": encoder, "decoder": decoder, "encoder_mask": mask}
    torch.save(inputs, tmp_path / "inputs.pt")
    train_dir = run.base_results_dir / name
    reference_logits(
        run.configs["training"],
        train_dir / "results" / "checkpoints" / "step-4",
        tmp_path / "inputs.pt",
        tmp_path / "reference.pt",
        processes,
        family="t5",
    )
    return (encoder, decoder, mask), torch.load(tmp_path / "reference.pt")


def _results(run, name):
    return run.base_results_dir / name / "convert_nemo" / "results"


def test_t5_trained_tp2_converts_to_tp1_and_hugging_face_with_the_checkpoint_logits(t5_tp2, tmp_path):
    run, log = t5_tp2
    results = _results(run, "t5_tiny")
    assert "step-4 (fp32" in log and "T5ForConditionalGeneration" in log
    model, tokenizer = standalone.load_t5_from_nemo(results / "megatron_t5.nemo")
    batch, reference = _reference(run, "t5_tiny", tmp_path, tokenizer, processes=2)
    logits = megatron_logits(model, *batch)
    assert logits.shape == reference.shape and (logits - reference).abs().max().item() < TOLERANCE
    name, hf_logits = _hf_logits(results / "hf", *batch)
    assert name == "T5ForConditionalGeneration"
    assert (hf_logits - reference[..., : tokenizer.vocab_size]).abs().max().item() < TOLERANCE
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(results / "hf")
    text = tiny_pile_texts()[3]
    assert hf_tokenizer(text, add_special_tokens=False).input_ids == tokenizer.encode(text)

    # The TP=2 archive holds megatron's own TP=2 split, which T5's rules reproduce from the TP=1 weights; merged
    # back, it computes the same logits.
    _, full = standalone.load_t5_nemo(results / "megatron_t5.nemo")
    config, merged = standalone.load_t5_nemo(results / "megatron_t5_tp2.nemo")
    layout = t5_shard_layout(config, 2)
    for rank in range(2):
        shard = standalone.load_nemo_shard(results / "megatron_t5_tp2.nemo", rank, 0)
        ours = split_state_dict(full, layout, rank, 0)
        assert sorted(shard) == sorted(ours)
        for key in shard:
            assert torch.equal(shard[key], ours[key]), key
    assert sorted(merged) == sorted(full) and all(torch.equal(merged[key], full[key]) for key in full)


def test_mt5_trained_tp1_converts_to_tp2_with_its_sentencepiece_model(mt5_tp1, tmp_path):
    run, log = mt5_tp1
    nemo = _results(run, "mt5_tiny") / "megatron_mt5.nemo"
    with tarfile.open(nemo) as archive:
        names = set(archive.getnames())
    assert names == {
        "model_config.yaml",
        "tokenizer/mt5_tokenizer.model",
        "tp_rank_00_pp_rank_000/model_weights.pt",
        "tp_rank_01_pp_rank_000/model_weights.pt",
    }
    # The family defaults: no Hugging Face folder, and the log says why.
    assert "no Hugging Face export (hf.mode: auto): no Hugging Face class computes this T5 exactly" in log
    assert not (_results(run, "mt5_tiny") / "hf").exists()
    model, tokenizer = standalone.load_t5_from_nemo(nemo)  # merged from TP=2 to this one process
    assert tokenizer.unique_identifiers["class"] == "SentencePieceTokenizer"
    batch, reference = _reference(run, "mt5_tiny", tmp_path, tokenizer, processes=1)
    logits = megatron_logits(model, *batch)
    assert logits.shape == reference.shape and (logits - reference).abs().max().item() < TOLERANCE
