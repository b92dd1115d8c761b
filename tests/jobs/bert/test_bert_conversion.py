"""BERT conversion on real runs: the tiny BERT data preparation (WordPiece trained here) feeds two 4-step training
runs that the launcher planned with default paths, and the conversion job's outputs are checked against the
training checkpoints, whose logits come from the trainer's own code (checkpoint_logits.py).

- gelu, trained TP=1 -> .nemo TP=1 and Hugging Face MegatronBertForPreTraining: the masked-LM and sentence-order
  logits of the checkpoint, and the Hugging Face tokenizer's ids; -> .nemo TP=2 (two processes) whose shards are
  megatron's own split, which our rules must reproduce, and whose merged Hugging Face export is the same;
- geglu (the family default), trained TP=2 -> .nemo TP=1: the TP=2 checkpoint's logits; Hugging Face `auto` logs
  why nothing was written, `required` stops with one `Error:` line (exit 2); -> .nemo PP=2, whose stages (layers
  renumbered, heads and the tied copy of the word embeddings on the last) match our split rules.
"""

import os
import subprocess

import pytest
import yaml

from tests.conftest import require_module

torch = require_module("torch")
transformers = require_module("transformers")
safetensors_torch = require_module("safetensors.torch")

from nemo_launcher.jobs.bert.shards import bert_shard_layout  # noqa: E402
from nemo_launcher.jobs.bert.standalone import load_bert_from_nemo, load_bert_nemo  # noqa: E402
from nemo_launcher.jobs.core import nemo_archive  # noqa: E402
from nemo_launcher.jobs.core.shards import split_state_dict  # noqa: E402
from tests.jobs import warm_python  # noqa: E402
from tests.jobs.pipeline_support import REPO, plan_pipeline, reference_logits, run_job  # noqa: E402

TRAIN, CONVERT = "nemo_launcher.jobs.bert.train", "nemo_launcher.jobs.bert.convert"
TOLERANCE = 1e-5  # max |logit difference| in fp32
FIRST = "The licensee may copy and distribute the Program"
SECOND = "provided that the notice is kept intact."
SHORT_TRAINING = [
    "training.trainer.max_steps=4",
    "training.trainer.val_check_interval=2",
    "training.trainer.limit_val_batches=1",
    "training.trainer.limit_test_batches=0",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=2",
    "training.model.encoder_seq_length=64",
    "training.model.optim.sched.warmup_steps=1",
    "training.model.init_method_std=0.2",  # logits far from uniform, so a wrong mapping cannot hide
]


@pytest.fixture(scope="module")
def bert_data(tiny_data):
    """What `data_preparation=bert/tiny_pile` writes: the three tiny Pile shards split into sentences and the
    lower-case WordPiece vocabulary trained on them, run by the launcher on this machine."""
    return tiny_data("bert/tiny_pile")


def _train_and_convert(work, data_dir, overrides, processes):
    run = plan_pipeline(
        work,
        [
            "stages=[training,conversion]",
            "training=bert/tiny",
            "conversion=bert/convert_bert",
            *SHORT_TRAINING,
            *overrides,
        ],
        data_dir,
    )
    run_job(run.configs["training"], TRAIN, processes=processes)
    log = run_job(run.configs["conversion"], CONVERT).stdout
    return run, log


def _variant(planned, folder, name, **changes):
    """The planned conversion config with changed model / run / hf keys, written into folder."""
    config = yaml.safe_load(planned.configs["conversion"].read_text())
    for section, values in changes.items():
        config[section].update(values)
    model = config["model"]
    model["model_parallel_size"] = model["tensor_model_parallel_size"] * model["pipeline_model_parallel_size"]
    config["run"]["ntasks_per_node"] = model["model_parallel_size"]
    path = folder / f"{name}_hydra.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def gelu(tmp_path_factory, bert_data):
    work = tmp_path_factory.mktemp("bert_gelu")
    run, log = _train_and_convert(work, bert_data, ["training.model.activation=gelu"], processes=1)
    results = _results(run)
    tp2 = _variant(
        run,
        work,
        "convert_tp2",
        model={"tensor_model_parallel_size": 2},
        run={"nemo_file_name": "megatron_bert_tp2.nemo"},
        hf={"output_dir": str(results / "hf_tp2")},
    )
    run_job(tp2, CONVERT, processes=2)
    return run, log


@pytest.fixture(scope="module")
def geglu_tp2(tmp_path_factory, bert_data):
    work = tmp_path_factory.mktemp("bert_geglu")
    run, log = _train_and_convert(
        work, bert_data, ["training.trainer.devices=2", "training.model.tensor_model_parallel_size=2"], processes=2
    )
    pp2 = _variant(
        run,
        work,
        "convert_pp2",
        model={"pipeline_model_parallel_size": 2},
        run={"nemo_file_name": "megatron_bert_pp2.nemo"},
        hf={"mode": "off"},
    )
    run_job(pp2, CONVERT, processes=2)
    return run, log


def _results(run):
    return run.base_results_dir / "bert_tiny" / "convert_nemo" / "results"


def _inputs(tokenizer):
    """Two pairs of segments, [CLS] A [SEP] B [SEP], the second cut short and padded: token types and the padding
    mask both matter."""
    first, second = tokenizer.encode(FIRST), tokenizer.encode(SECOND)
    long = [tokenizer.cls, *first, tokenizer.sep, *second, tokenizer.sep]
    short = [tokenizer.cls, *first[:4], tokenizer.sep, *second[:3], tokenizer.sep]
    rows, types, masks = [], [], []
    for ids, cut in ((long, len(first) + 2), (short, 6)):
        pad = len(long) - len(ids)
        rows.append(ids + [tokenizer.pad] * pad)
        types.append([0] * cut + [1] * (len(ids) - cut) + [0] * pad)
        masks.append([1] * len(ids) + [0] * pad)
    return {"tokens": torch.tensor(rows), "types": torch.tensor(types), "padding_mask": torch.tensor(masks)}


def _reference(run, tmp_path, inputs, processes):
    torch.save(inputs, tmp_path / "inputs.pt")
    checkpoint = run.base_results_dir / "bert_tiny" / "results" / "checkpoints" / "step-4"
    reference_logits(
        run.configs["training"], checkpoint, tmp_path / "inputs.pt", tmp_path / "reference.pt", processes, family="bert"
    )
    return torch.load(tmp_path / "reference.pt")


def _nemo_logits(model, inputs):
    with torch.no_grad():
        lm, binary = model(inputs["tokens"], inputs["padding_mask"], tokentype_ids=inputs["types"])
    return lm.float(), binary.float()


def _real(logits, inputs):
    """The rows of real tokens: megatron also masks padded queries, Hugging Face only padded keys."""
    return logits[inputs["padding_mask"].bool()]


def _max_diff(a, b) -> float:
    return (a - b).abs().max().item()


def test_gelu_tp1_nemo_and_megatron_bert_give_the_checkpoint_logits(gelu, tmp_path):
    run, log = gelu
    results = _results(run)
    assert "MegatronBertForPreTraining" in log and "step-4 (fp32" in log
    model, tokenizer = load_bert_from_nemo(results / "megatron_bert.nemo")
    inputs = _inputs(tokenizer)
    reference = _reference(run, tmp_path, inputs, processes=1)
    lm, binary = _nemo_logits(model, inputs)
    assert lm.shape == reference["lm"].shape and binary.shape == (2, 2)
    assert _max_diff(_real(lm, inputs), _real(reference["lm"], inputs)) < TOLERANCE
    assert _max_diff(binary, reference["binary"]) < TOLERANCE

    hf = transformers.MegatronBertForPreTraining.from_pretrained(results / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf(input_ids=inputs["tokens"], attention_mask=inputs["padding_mask"], token_type_ids=inputs["types"])
    vocab = tokenizer.vocab_size
    assert out.prediction_logits.shape[-1] == vocab  # megatron's padding rows cut off
    assert _max_diff(_real(out.prediction_logits, inputs), _real(reference["lm"][..., :vocab], inputs)) < TOLERANCE
    assert _max_diff(out.seq_relationship_logits, reference["binary"]) < TOLERANCE
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(results / "hf")
    text = f"{FIRST} {SECOND}"
    assert hf_tokenizer(text, add_special_tokens=False)["input_ids"] == tokenizer.encode(text)


def test_gelu_tp2_archive_shards_match_our_split_and_its_merged_export_is_the_same(gelu):
    run, _ = gelu
    results = _results(run)
    config, full = load_bert_nemo(results / "megatron_bert.nemo")
    tp2 = results / "megatron_bert_tp2.nemo"
    assert nemo_archive.layout_of(nemo_archive.read_nemo_config(tp2)) == (2, 1)
    _, merged = load_bert_nemo(tp2)
    assert merged.keys() == full.keys()
    assert all(torch.equal(merged[key], value) for key, value in full.items())
    layout = bert_shard_layout(config, 2, 1)
    for rank in range(2):
        megatrons, ours = nemo_archive.load_nemo_shard(tp2, rank, 0), split_state_dict(full, layout, rank, 0)
        assert ours.keys() == megatrons.keys()
        assert all(torch.equal(ours[key], megatrons[key]) for key in ours), rank
    exported = [safetensors_torch.load_file(results / name / "model.safetensors") for name in ("hf", "hf_tp2")]
    assert exported[0].keys() == exported[1].keys()
    assert all(torch.equal(exported[0][key], exported[1][key]) for key in exported[0])


def test_geglu_tp2_checkpoint_to_tp1_nemo_gives_its_logits_and_says_why_there_is_no_hf_export(geglu_tp2, tmp_path):
    run, log = geglu_tp2
    results = _results(run)
    assert "no Hugging Face export (hf.mode: auto): " in log and "activation is geglu" in log
    assert "Hugging Face  not written (hf.mode: auto)" in log  # the summary line
    assert not (results / "hf").exists()
    model, tokenizer = load_bert_from_nemo(results / "megatron_bert.nemo")
    inputs = _inputs(tokenizer)
    reference = _reference(run, tmp_path, inputs, processes=2)
    lm, binary = _nemo_logits(model, inputs)
    assert lm.shape == reference["lm"].shape
    assert _max_diff(_real(lm, inputs), _real(reference["lm"], inputs)) < TOLERANCE
    assert _max_diff(binary, reference["binary"]) < TOLERANCE


def test_geglu_with_hf_required_stops_with_one_error_line(geglu_tp2, tmp_path):
    run, _ = geglu_tp2
    config = _variant(
        run,
        tmp_path,
        "convert_required",
        run={"nemo_file_name": "megatron_bert_required.nemo"},
        hf={"mode": "required"},
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    done = subprocess.run(
        [warm_python.interpreter(), "-m", CONVERT, "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "hf.mode: required, but" in errors[0] and "activation is geglu" in errors[0]
    assert "Traceback" not in done.stderr


def test_geglu_pp2_archive_stages_match_our_split_rules(geglu_tp2):
    run, _ = geglu_tp2
    results = _results(run)
    config, full = load_bert_nemo(results / "megatron_bert.nemo")
    pp2 = results / "megatron_bert_pp2.nemo"
    assert nemo_archive.layout_of(nemo_archive.read_nemo_config(pp2)) == (1, 2)
    _, merged = load_bert_nemo(pp2)
    assert merged.keys() == full.keys()
    assert all(torch.equal(merged[key], value) for key, value in full.items())
    layout = bert_shard_layout(config, 1, 2)
    for stage in range(2):
        megatrons, ours = nemo_archive.load_nemo_shard(pp2, 0, stage), split_state_dict(full, layout, 0, stage)
        assert ours.keys() == megatrons.keys(), stage
        assert all(torch.equal(ours[key], megatrons[key]) for key in ours), stage
    assert {"binary_head.weight", "lm_head.dense.weight", "output_layer.weight"} <= megatrons.keys()  # the last stage
    assert "encoder.layers.0.mlp.linear_fc1.weight" in megatrons  # layer 1 of the model, renumbered


def test_masked_lm_only_and_untied_output_export_as_megatron_bert_for_masked_lm(tmp_path):
    """No binary head (no token types, MegatronBertForMaskedLM) and an output layer of its own (decoder.weight):
    a randomly initialised model, norms moved off 1 and 0, so every mapped tensor matters."""
    from nemo_launcher.contract.schemas.bert_training import BertModelSection
    from nemo_launcher.jobs.bert.hf_export import MASKED_LM, export_hf
    from nemo_launcher.jobs.bert.standalone import build_inference_model, inference_section, start_bert_model_parallel
    from nemo_launcher.jobs.common.config import bind

    section = {
        "micro_batch_size": 2,
        "global_batch_size": 2,
        "num_layers": 2,
        "hidden_size": 64,
        "ffn_hidden_size": 96,
        "num_attention_heads": 4,
        "encoder_seq_length": 16,
        "max_position_embeddings": 16,
        "activation": "gelu",
        "bert_binary_head": False,
        "share_embeddings_and_output_weights": False,
        "layernorm_epsilon": 1.0e-6,
        "init_method_std": 0.2,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "transformer_engine": False,
        "tokenizer": {"library": "megatron", "type": "BertWordPieceLowerCase", "vocab_file": "unused.txt"},
        "optim": {"name": "adamw", "lr": 1.0e-3, "sched": {"name": "CosineAnnealing"}},
        "data": {"seq_length": 16},
    }
    start_bert_model_parallel(1, 1)
    torch.manual_seed(3)
    model = build_inference_model(
        inference_section(bind(BertModelSection, section, "model"), 1, 1), 256, "fp32", initialize=True
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
    state = {key: value for key, value in model.state_dict().items() if not key.endswith("._extra_state")}
    assert MASKED_LM == export_hf(section, state, tmp_path, vocab_size=250, pad_id=0)

    tokens = torch.randint(5, 250, (2, 12))
    mask = torch.ones_like(tokens)
    mask[1, 9:] = 0
    with torch.no_grad():
        ours, binary = model(tokens, mask)
        hf = transformers.MegatronBertForMaskedLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
        theirs = hf(input_ids=tokens, attention_mask=mask).logits
    assert binary is None and theirs.shape == (2, 12, 250)
    assert _max_diff(_real(theirs, {"padding_mask": mask}), _real(ours[..., :250], {"padding_mask": mask})) < TOLERANCE
