"""Supervised fine-tuning: SQuAD preparation, prompt masking, sampling, and a real run on a tiny GPT."""

import json
import re

import pytest
import yaml

from nemo_launcher.jobs.common.config import JobConfigError
from nemo_launcher.jobs.data import squad
from tests.jobs.data_support import gpt2_files  # noqa: F401  (fixture)
from tests.jobs.sft_support import TEMPLATE, qa_jsonl, run_tuning, sft_section, tiny_bpe_files, tiny_nemo  # noqa: F401  (fixtures)

SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {
                    "context": "Super Bowl 50 was played in Santa Clara. The Denver Broncos won.",
                    "qas": [
                        {
                            "id": "a",
                            "question": "Who won Super Bowl 50?",
                            "answers": [
                                {"answer_start": 42, "text": "Denver Broncos"},
                                {"answer_start": 42, "text": "The Denver Broncos"},
                            ],
                        },
                        {
                            "id": "b",
                            "question": "Where was it played?",
                            "answers": [{"answer_start": 28, "text": "Santa Clara"}],
                        },
                    ],
                }
            ],
        },
        {
            "title": "Impossible",
            "paragraphs": [
                {
                    "context": "Nothing here answers it.",
                    "qas": [{"id": "c", "question": "Why?", "answers": [], "is_impossible": True}],
                }
            ],
        },
    ],
}


def _write_squad(tmp_path, document=SQUAD):
    source = tmp_path / "train-v1.1.json"
    source.write_text(json.dumps(document))
    return source


def test_squad_json_becomes_prompt_answer_jsonl(tmp_path):
    source = _write_squad(tmp_path)
    output = tmp_path / "out" / "train-v1.1_gpt.jsonl"
    counts = squad.prepare({"train": {"source": str(source), "output": str(output)}})
    assert counts == {"train": 2}  # the unanswerable question is skipped
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert lines[0] == {
        "input": (
            "Context: Super Bowl 50 was played in Santa Clara. The Denver Broncos won.\n"
            "Question: Who won Super Bowl 50?"
        ),
        "output": "Denver Broncos",
        "answers": ["Denver Broncos", "The Denver Broncos"],
    }
    assert lines[1]["output"] == "Santa Clara"
    assert [p.name for p in output.parent.iterdir()] == [output.name], "no partial file left behind"

    # An existing output is kept as it is: reruns and later jobs reuse it.
    output.write_text('{"input": "kept", "output": "as is"}\n')
    assert squad.prepare({"train": {"source": str(source), "output": str(output)}}) == {"train": 1}
    assert "kept" in output.read_text()


@pytest.mark.parametrize(
    "document,words",
    [
        ({"data": [{"paragraphs": [{"context": 3, "qas": []}]}]}, ["data[0].paragraphs[0].context"]),
        ({"version": "1.1"}, ["not a SQuAD file"]),
    ],
)
def test_malformed_squad_names_the_place(tmp_path, document, words):
    source = _write_squad(tmp_path, document)
    with pytest.raises(JobConfigError) as error:
        squad.convert(source, tmp_path / "out.jsonl")
    assert all(word in str(error.value) for word in words)
    assert not (tmp_path / "out.jsonl").exists()


def test_squad_program_reads_the_stage_config(tmp_path, capsys):
    source = _write_squad(tmp_path)
    config = tmp_path / "squad_gpt3_hydra.yaml"
    section = {
        "train": {"source": str(source), "output": str(tmp_path / "t.jsonl")},
        "validation": {"source": str(tmp_path / "missing-dev.json"), "output": str(tmp_path / "v.jsonl")},
    }
    config.write_text(yaml.safe_dump({"run": {"name": "x"}, "squad_preparation": section}))
    assert squad.main(["--config", str(config)]) == 2
    assert "missing-dev.json: no such file. Nothing is downloaded here" in capsys.readouterr().err
    section["validation"]["source"] = str(source)
    config.write_text(yaml.safe_dump({"run": {"name": "x"}, "squad_preparation": section}))
    assert squad.main(["--config", str(config)]) == 0
    assert (tmp_path / "v.jsonl").is_file()


# The sample-encoding tests below count GPT-2's tokens (" red" is one of them); they run no model, so GPT-2's
# vocabulary costs them nothing. The model runs further down use the tiny BPE through tiny_nemo.
@pytest.fixture(scope="module")
def gpt2_tokenizer(gpt2_files):  # noqa: F811
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    return load_tokenizer("megatron", "GPT2BPETokenizer", vocab_file=gpt2_files[0], merge_file=gpt2_files[1])


def _section(**overrides):
    from nemo_launcher.contract.schemas.gpt_sft import DatasetSection
    from nemo_launcher.jobs.common.config import bind

    return bind(DatasetSection, {"file_names": ["x.jsonl"], "prompt_template": TEMPLATE, **overrides}, "train_ds")


def test_samples_count_only_answer_tokens(gpt2_tokenizer):
    from nemo_launcher.jobs.tuning.sft_data import SampleEncoder, collate

    encoder = SampleEncoder(gpt2_tokenizer, _section(max_seq_length=64))
    example = {"input": "The sky is red. What color is the sky?", "output": "red"}
    ids, answer = encoder.encode(example)
    prompt = gpt2_tokenizer.encode("The sky is red. What color is the sky?\nAnswer:")
    # The prompt's tokens are exactly what a user's prompt gives; the space goes with the answer word.
    assert ids[: len(prompt)] == prompt and answer == [False] * len(prompt) + [True, True]
    assert ids[len(prompt) :] == gpt2_tokenizer.encode(" red") + [gpt2_tokenizer.eod]

    short = encoder.encode({"input": "Sky?", "output": "blue"})
    batch = collate([(ids, answer), short], pad_id=gpt2_tokenizer.eod, answer_only_loss=True)
    assert len(ids) - 1 == 15 and batch["tokens"].shape == (2, 16)  # the longest sample, rounded up to a multiple of 8
    row = batch["loss_mask"][0]
    counted = [int(i) for i in batch["labels"][0][row.bool()]]
    assert counted == ids[len(prompt) :], "exactly the answer and the end-of-document token are predicted and counted"
    assert row.sum() == 2 and batch["loss_mask"][1].sum() == 2
    assert batch["tokens"][0, : len(ids) - 1].tolist() == ids[:-1]
    everything = collate([(ids, answer)], pad_id=gpt2_tokenizer.eod, answer_only_loss=False)
    assert everything["loss_mask"][0].sum() == len(ids) - 1  # all real tokens, never the padding


def test_long_samples_lose_prompt_tokens_first(gpt2_tokenizer):
    from nemo_launcher.jobs.tuning.sft_data import SampleEncoder

    example = {"input": "word " * 100 + "What color?", "output": "a long answer of several words"}
    ids, answer = SampleEncoder(gpt2_tokenizer, _section(max_seq_length=20)).encode(example)
    assert len(ids) == 21 and sum(answer) == len(gpt2_tokenizer.encode(" a long answer of several words")) + 1
    assert gpt2_tokenizer.decode(ids[: len(ids) - sum(answer)]).endswith("What color?\nAnswer:")
    ids, answer = SampleEncoder(gpt2_tokenizer, _section(max_seq_length=8, truncation_field="answer")).encode(
        {"input": "Sky?", "output": "a long answer of several words"}
    )
    assert len(ids) == 9 and ids[-1] != gpt2_tokenizer.eod  # the cut answer is not marked as finished


def test_mixed_dataset_keeps_proportions_and_order():
    from nemo_launcher.jobs.tuning.sft_data import MixedDataset

    a = [{"input": f"a{i}", "output": ""} for i in range(10)]
    b = [{"input": f"b{i}", "output": ""} for i in range(5)]
    mixed = MixedDataset([a, b], [0.75, 0.25], size=40, seed=3)
    names = [mixed[n]["input"] for n in range(40)]
    assert sum(name.startswith("a") for name in names) == 30
    assert sum(name.startswith("a") for name in names[:8]) == 6, "every window holds the sources in proportion"
    # Each pass over a source shows every example once, in a fresh order.
    a_draws = [n for n in names if n.startswith("a")]
    assert sorted(a_draws[:10]) == sorted(e["input"] for e in a) and a_draws[:10] != a_draws[10:20]
    assert names == [MixedDataset([a, b], [0.75, 0.25], size=40, seed=3)[n]["input"] for n in range(40)]
    assert names != [MixedDataset([a, b], [0.75, 0.25], size=40, seed=4)[n]["input"] for n in range(40)]


@pytest.mark.parametrize(
    "change,words",
    [
        ({"model": {"pipeline_model_parallel_size": 2}}, ["pipeline_model_parallel_size", "set 1"]),
        ({"model": {"peft": {"peft_scheme": "lora", "lora_tuning": {}}}}, ["fine_tuning.model.peft", "peft stage"]),
        (
            {"model": {"data": {"train_ds": {"prompt_template": "{output} {input}"}}}},
            ["prompt_template", "end with {output}"],
        ),
        (
            {"model": {"data": {"train_ds": {"file_names": ["a", "b"], "concat_sampling_probabilities": [0.5, 0.6]}}}},
            ["concat_sampling_probabilities", "summing to 1"],
        ),
        ({"trainer": {"max_step": 3}}, ["fine_tuning.trainer.max_step", "unknown key"]),
    ],
)
def test_bad_fine_tuning_config_names_the_key(change, words, tmp_path):
    from nemo_launcher.contract.schemas.gpt_sft import SftConfig

    section = sft_section("m.nemo", "d.jsonl", str(tmp_path))
    _merge(section, change)
    with pytest.raises(JobConfigError) as error:
        SftConfig.from_dict(section, stage="fine_tuning")
    assert all(word in str(error.value) for word in words), str(error.value)


def _merge(target, change):
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def test_fine_tuning_loss_falls_and_counts_answer_tokens_only(tmp_path, tiny_nemo, qa_jsonl):  # noqa: F811
    import torch

    from nemo_launcher.contract.schemas.gpt_sft import SftConfig
    from nemo_launcher.jobs.core.steps import masked_token_loss
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo
    from nemo_launcher.jobs.gpt.inference import load_gpt_nemo as load_nemo
    from nemo_launcher.jobs.tuning.sft_data import SampleEncoder, collate, read_jsonl
    from tests.jobs.gpt_train_support import losses

    section = sft_section(tiny_nemo, qa_jsonl, str(tmp_path))
    section["model"]["data"]["validation_ds"]["metric"] = {"name": "exact_string_match", "tokens_to_generate": 3}
    cfg = SftConfig.from_dict(section, stage="fine_tuning")
    stdout = run_tuning("finetune", section, tmp_path).stdout
    path = tmp_path / "checkpoints" / "megatron_gpt_sft.nemo"

    curve = losses(stdout)
    assert sorted(curve) == [4, 8, 12, 16] and curve[16] < curve[4] - 0.5, curve
    validations = [line for line in stdout.splitlines() if line.startswith("validation step=")]
    assert [line.split()[1] for line in validations] == ["step=8", "step=16"]
    score = float(validations[-1].split("exact_string_match_colors=")[1].split()[0])
    assert 0.0 <= score <= 1.0
    assert re.search(rf"fine-tuned model +{re.escape(str(path))}\n", stdout), stdout[-1500:]
    assert (tmp_path / "checkpoints" / "step-16" / "COMPLETE").is_file()

    _, base = load_nemo(tiny_nemo)
    _, tuned = load_nemo(path)
    assert tuned.keys() == base.keys() and not torch.equal(
        tuned["decoder.layers.0.mlp.linear_fc1.weight"], base["decoder.layers.0.mlp.linear_fc1.weight"]
    )

    # The loss the loop minimises is the mean cross-entropy of predicting the answer tokens (and the end
    # of the answer) from everything before them; the prompt's own tokens contribute nothing.
    model, tokenizer = load_gpt_from_nemo(path)
    encoder = SampleEncoder(tokenizer, cfg.model.data.train_ds)
    samples = [encoder.encode(e) for e in read_jsonl(qa_jsonl)[:4]]
    batch = collate(samples, pad_id=tokenizer.eod, answer_only_loss=True)
    with torch.no_grad():
        per_token = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        loop_loss, _ = masked_token_loss(batch["loss_mask"], per_token)
        logits = model(batch["tokens"], batch["position_ids"], None).float()
    manual = []
    for row, (ids, answer) in enumerate(samples):
        start = answer.index(True)  # first answer token; the prediction of ids[j] sits at position j - 1
        for j in range(start, len(ids)):
            manual.append(torch.nn.functional.cross_entropy(logits[row, j - 1], torch.tensor(ids[j])))
    assert torch.allclose(loop_loss, torch.stack(manual).mean(), atol=1e-5)


def test_launcher_runs_squad_fine_tuning_then_export_here(tmp_path, tiny_nemo):  # noqa: F811
    """stages=[fine_tuning,export] through main.py on this machine (cluster_type=interactive): SQuAD files are
    prepared, the converted model found at its default path is fine-tuned, and the result is exported."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    results, data = tmp_path / "results", tmp_path / "data"
    converted = results / "gpt3_tiny" / "convert_nemo" / "results" / "megatron_gpt.nemo"
    converted.parent.mkdir(parents=True)
    shutil.copyfile(tiny_nemo, converted)
    squad_dir = data / "squad_data" / "v1.1"
    squad_dir.mkdir(parents=True)
    for name, count in (("train-v1.1.json", 16), ("dev-v1.1.json", 8)):
        qas = [
            {"id": str(i), "question": f"What is item {i}?", "answers": [{"answer_start": 0, "text": f"thing {i}"}]}
            for i in range(count)
        ]
        document = {
            "version": "1.1",
            "data": [{"title": "t", "paragraphs": [{"context": "Items are things.", "qas": qas}]}],
        }
        (squad_dir / name).write_text(json.dumps(document))
    tiny = [
        "trainer.devices=1",
        "trainer.accelerator=cpu",
        "trainer.precision=32",
        "trainer.max_steps=4",
        "trainer.log_every_n_steps=2",
        "trainer.val_check_interval=4",
        "trainer.limit_val_batches=1",
        "model.global_batch_size=4",
        "model.micro_batch_size=2",
        "model.optim.lr=1e-3",
        "model.optim.sched.warmup_steps=1",
        "model.data.train_ds.max_seq_length=64",
    ]
    command = [
        sys.executable,
        "main.py",
        "stages=[fine_tuning,export]",
        "training=gpt3/tiny",
        "fine_tuning=gpt3/squad",
        "export=gpt3/export_gpt3",
        "cluster_type=interactive",
        f"base_results_dir={results}",
        f"data_dir={data}",
        *[f"fine_tuning.{o}" for o in tiny],
        "export.model.weight_data_type=fp32",
        "export.triton_deployment.data_type=fp32",
        "export.model.checkpoint_path=${fine_tuning.exp_manager.explicit_log_dir}/checkpoints/megatron_gpt_sft.nemo",
    ]
    env = {k: v for k, v in os.environ.items() if k != "NEMO_LAUNCHER_DEBUG"}
    result = subprocess.run(
        command, cwd=repo, capture_output=True, text=True, timeout=900, env=dict(env, OMP_NUM_THREADS="1")
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    lines = [json.loads(line) for line in (squad_dir / "train-v1.1_gpt.jsonl").read_text().splitlines()]
    assert len(lines) == 16 and lines[0] == {
        "input": "Context: Items are things.\nQuestion: What is item 0?",
        "output": "thing 0",
        "answers": ["thing 0"],
    }
    tuned = results / "gpt3_tiny" / "squad" / "results" / "checkpoints" / "megatron_gpt_sft.nemo"
    assert tuned.is_file() and (tuned.parent / "step-4" / "COMPLETE").is_file()
    (log,) = (results / "gpt3_tiny" / "squad").glob("log-*.out")
    text = log.read_text()
    assert "step=2/4 loss=" in text and "step=4/4 loss=" in text and "validation step=4 val_loss=" in text
    repo_dir = results / "gpt3_tiny" / "export_tp1_pp1_fp32_fp32" / "model_repo" / "gpt3_tiny"
    assert (repo_dir / "config.pbtxt").is_file() and (repo_dir / "1" / "model.nemo").is_file()
