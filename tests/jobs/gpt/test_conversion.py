"""Conversion on real training runs: the trainer trains the tiny GPT for 4 steps, the launcher writes the
conversion job's config (default paths only), and the job's outputs are checked against the checkpoint.
The classic run is the session's `tiny_pipeline` (conftest.py), shared with the evaluation tests.

- classic GPT, trained TP=1 -> .nemo TP=1 and Hugging Face GPT-2: same logits as the checkpoint;
- improved GPT (rope, swiglu, rmsnorm, GQA, untied), trained TP=2 -> .nemo TP=1 and Hugging Face Llama:
  same logits as the TP=2 checkpoint; and -> .nemo TP=2, whose shards are megatron's own split, which
  our merge and split rules must reproduce exactly.
Reference logits come from tests/jobs/checkpoint_logits.py (the trainer's code, not the converter's).
"""

import pytest
import yaml

from tests.conftest import require_module

torch = require_module("torch")
transformers = require_module("transformers")

from nemo_launcher.jobs.core import nemo_archive  # noqa: E402
from nemo_launcher.jobs.core.shards import split_state_dict  # noqa: E402
from nemo_launcher.jobs.gpt import inference  # noqa: E402
from nemo_launcher.jobs.gpt.shards import gpt_shard_layout  # noqa: E402
from tests.jobs.gpt_models import megatron_logits  # noqa: E402
from tests.jobs.pipeline_support import (  # noqa: E402
    IMPROVED,
    SHORT_TRAINING,
    TINY_VOCAB_DIVISOR,
    padded_vocab,
    plan_pipeline,
    reference_logits,
    run_job,
)

TRAIN, CONVERT = "nemo_launcher.jobs.gpt.train", "nemo_launcher.jobs.gpt.convert"
TOLERANCE = 1e-5  # max |logit difference| in fp32
TEXT = "The licensee may copy and distribute the Program, provided that the notice is kept intact."


@pytest.fixture(scope="module")
def classic(tiny_pipeline):
    return tiny_pipeline


@pytest.fixture(scope="module")
def improved_tp2(tmp_path_factory, sample_data_dir):
    work = tmp_path_factory.mktemp("improved")
    common = [
        "training=gpt3/tiny",
        "conversion=gpt3/convert_gpt3",
        *SHORT_TRAINING,
        *IMPROVED,
        f"training.model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR}",  # padding rows, as in tiny_pipeline
        "training.trainer.devices=2",
        "training.model.tensor_model_parallel_size=2",
    ]
    run = plan_pipeline(work, ["stages=[training,conversion]", *common], sample_data_dir)
    run_job(run.configs["training"], TRAIN, processes=2)
    run_job(run.configs["conversion"], CONVERT)
    # The same checkpoint to a TP=2 archive: two processes, each writing the shard megatron gives it.
    resharded = plan_pipeline(
        work,
        [
            "stages=[conversion]",
            *common,
            "conversion.model.tensor_model_parallel_size=2",
            "conversion.run.nemo_file_name=megatron_gpt_tp2.nemo",
            "conversion.hf.mode=off",
        ],
        sample_data_dir,
    )
    run_job(resharded.configs["conversion"], CONVERT, processes=2)
    return run


def _paths(run):
    train_dir = run.base_results_dir / "gpt3_tiny"
    results = train_dir / "convert_nemo" / "results"
    return train_dir, results


def _tokens(tokenizer):
    return torch.tensor([tokenizer.encode(TEXT)])


def _reference(run, tmp_path, tokens, processes):
    train_dir, _ = _paths(run)
    torch.save(tokens, tmp_path / "tokens.pt")
    reference_logits(
        run.configs["training"],
        train_dir / "results" / "checkpoints" / "step-4",
        tmp_path / "tokens.pt",
        tmp_path / "reference.pt",
        processes,
    )
    return torch.load(tmp_path / "reference.pt")


def _hf_logits(hf_dir, tokens):
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return type(model).__name__, model(tokens).logits


def test_classic_tp1_nemo_and_gpt2_give_the_checkpoint_logits(classic, tmp_path):
    run, log = classic
    train_dir, results = _paths(run)
    assert f"{train_dir / 'results' / 'checkpoints' / 'step-4'} (fp32" in log  # the newest complete checkpoint
    model, tokenizer = inference.load_gpt_from_nemo(results / "megatron_gpt.nemo")
    tokens = _tokens(tokenizer)
    reference = _reference(run, tmp_path, tokens, processes=1)
    ours = megatron_logits(model, tokens)
    assert ours.shape == reference.shape
    assert (ours - reference).abs().max().item() < TOLERANCE

    name, hf = _hf_logits(results / "hf", tokens)
    assert name == "GPT2LMHeadModel"
    # Hugging Face gets the tokenizer's rows only; the checkpoint's padding rows are dropped.
    assert hf.shape[-1] == tokenizer.vocab_size < reference.shape[-1]
    assert (hf - reference[..., : tokenizer.vocab_size]).abs().max().item() < TOLERANCE
    # The .nemo carries the training run's model section and its own tokenizer files.
    config = nemo_archive.read_nemo_config(results / "megatron_gpt.nemo")
    assert config["num_layers"] == 2 and config["encoder_seq_length"] == 32


def test_tp2_checkpoint_to_tp1_nemo_and_llama_give_the_checkpoint_logits(improved_tp2, tmp_path):
    _, results = _paths(improved_tp2)
    model, tokenizer = inference.load_gpt_from_nemo(results / "megatron_gpt.nemo")
    tokens = _tokens(tokenizer)
    reference = _reference(improved_tp2, tmp_path, tokens, processes=2)
    ours = megatron_logits(model, tokens)
    # Padded for TP=2 at training time (2,304 rows; TP=1 would have padded the 2,048 tokens to 2,112).
    padded = padded_vocab(tokenizer.vocab_size, TINY_VOCAB_DIVISOR * 2)
    assert padded != padded_vocab(tokenizer.vocab_size, TINY_VOCAB_DIVISOR)
    assert ours.shape == reference.shape == (1, tokens.shape[1], padded)
    assert (ours - reference).abs().max().item() < TOLERANCE

    name, hf = _hf_logits(results / "hf", tokens)
    assert name == "LlamaForCausalLM"
    assert hf.shape[-1] == tokenizer.vocab_size
    assert (hf - reference[..., : tokenizer.vocab_size]).abs().max().item() < TOLERANCE


def test_tp2_archive_shards_match_our_merge_and_split_rules(improved_tp2):
    _, results = _paths(improved_tp2)
    config, full_from_tp1 = inference.load_gpt_nemo(results / "megatron_gpt.nemo")
    tp2 = results / "megatron_gpt_tp2.nemo"
    assert nemo_archive.layout_of(nemo_archive.read_nemo_config(tp2)) == (2, 1)
    _, merged = inference.load_gpt_nemo(tp2)
    assert merged.keys() == full_from_tp1.keys()
    for key, value in full_from_tp1.items():
        assert torch.equal(merged[key], value), key
    layout = gpt_shard_layout(config, 2, 1)
    for rank in range(2):
        ours = split_state_dict(full_from_tp1, layout, rank, 0)
        megatrons = nemo_archive.load_nemo_shard(tp2, rank, 0)
        assert ours.keys() == megatrons.keys()
        for key in ours:
            assert torch.equal(ours[key], megatrons[key]), (rank, key)


def test_pp2_archive_of_a_tied_model_matches_our_merge_and_split_rules(classic, tmp_path):
    """Pipeline stages: layers renumbered per stage, embeddings first, final norm and output last, and with
    tied embeddings the last stage's copy of the word embeddings."""
    run, _ = classic
    config = yaml.safe_load(run.configs["conversion"].read_text())
    config["model"]["pipeline_model_parallel_size"] = 2
    config["model"]["model_parallel_size"] = 2
    config["run"].update(nemo_file_name="megatron_gpt_pp2.nemo", ntasks_per_node=2)
    config["hf"]["mode"] = "off"
    pp2_config = tmp_path / "convert_pp2_hydra.yaml"
    pp2_config.write_text(yaml.safe_dump(config))
    run_job(pp2_config, CONVERT, processes=2)

    _, results = _paths(run)
    model_config, full = inference.load_gpt_nemo(results / "megatron_gpt.nemo")
    pp2 = results / "megatron_gpt_pp2.nemo"
    assert nemo_archive.layout_of(nemo_archive.read_nemo_config(pp2)) == (1, 2)
    _, merged = inference.load_gpt_nemo(pp2)
    assert merged.keys() == full.keys()
    assert all(torch.equal(merged[key], value) for key, value in full.items())
    layout = gpt_shard_layout(model_config, 1, 2)
    for stage in range(2):
        megatrons = nemo_archive.load_nemo_shard(pp2, 0, stage)
        ours = split_state_dict(full, layout, 0, stage)
        assert ours.keys() == megatrons.keys(), stage
        assert all(torch.equal(ours[key], megatrons[key]) for key in ours), stage
    assert "output_layer.weight" in megatrons  # the last stage's tied copy
