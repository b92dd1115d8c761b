"""The README's quick starts, end to end on this CPU: python3 main.py --config-name=quickstart (GPT) and
--config-name=quickstart_bert and --config-name=quickstart_t5.

Each runs once (about a minute), so every check of what a quick start shows a user is made here: the
results, and that the output and every job log are free of Python warnings and end with a summary.
"""

import json
import os
import re
import subprocess
import sys

from nemo_launcher.jobs.common.quiet import absent_accelerators
from nemo_launcher.launch.resolvers import REPO_ROOT


def _run_quickstart(name, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    run = subprocess.run(
        [sys.executable, "main.py", f"--config-name={name}", f"base_results_dir={results}", f"data_dir={data}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run, results, data


def test_quickstart_pipeline_runs_end_to_end(tmp_path):
    run, results, data = _run_quickstart("quickstart", tmp_path)
    assert f"training: {results}/gpt3_tiny" in run.stdout
    assert sorted(p.name for p in (data / "tiny_pile" / "preprocessed").glob("*.idx")) == [
        f"tiny_pile_0{i}_text_document.idx" for i in range(3)
    ]
    checkpoints = results / "gpt3_tiny" / "results" / "checkpoints"
    assert (checkpoints / "step-40" / "COMPLETE").exists()
    assert (results / "gpt3_tiny" / "convert_nemo" / "results" / "megatron_gpt.nemo").exists()
    scores = json.loads((results / "gpt3_tiny" / "eval_lambada" / "results" / "lm_eval_results.json").read_text())
    text = json.dumps(scores)
    assert "perplexity" in text and "acc" in text

    logs = {path: path.read_text() for path in sorted(results.rglob("log-*.out"))}
    assert len(logs) == 6, sorted(logs)  # download, extract, preprocess, training, conversion, evaluation
    joined = _assert_quiet_and_informative(
        run.stdout + run.stderr,
        logs,
        megatron_jobs=3,
        summaries=(
            "download finished: 3 shards done",
            "extract finished: 3 shards done",
            "preprocess finished: 3 shards done",
            "training finished at step=40 of 40",
            "conversion finished:",
            "evaluation finished:",
        ),
    )
    assert re.search(r"^  tokens +60\.2k$", joined, re.M)  # preprocess: the three shards' tokens
    assert re.search(r"^  lambada +.*perplexity \S+ ± \S+", joined, re.M)


def test_quickstart_bert_pipeline_runs_end_to_end(tmp_path):
    run, results, data = _run_quickstart("quickstart_bert", tmp_path)
    train_dir = results / "bert_tiny"
    for line in (
        f"data_preparation: {results}/tiny_pile_bert",
        f"training: {train_dir}",
        f"conversion: {train_dir}/convert_nemo",
    ):
        assert line in run.stdout
    prepared = data / "tiny_pile_bert"
    assert sorted(p.name for p in (prepared / "preprocessed").glob("*.idx")) == [
        f"tiny_pile_bert_0{i}_text_sentence.idx" for i in range(3)
    ]
    vocab = (prepared / "bpe" / "vocab.txt").read_text().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # trained here, BERT's specials first
    assert (train_dir / "results" / "checkpoints" / "step-40" / "COMPLETE").exists()
    converted = train_dir / "convert_nemo" / "results"
    assert (converted / "megatron_bert.nemo").exists()
    assert not (converted / "hf").exists()  # geglu, the family default, has no Hugging Face form

    logs = {path: path.read_text() for path in sorted(results.rglob("log-*.out"))}
    assert len(logs) == 6, sorted(logs)  # download, extract, train_tokenizer, preprocess, training, conversion
    joined = _assert_quiet_and_informative(
        run.stdout + run.stderr,
        logs,
        megatron_jobs=2,
        summaries=(
            "download finished: 3 shards done",
            "extract finished: 3 shards done",
            "train_tokenizer finished: 1 tokenizer done",
            "preprocess finished: 3 shards done",
            "training finished at step=40 of 40",
            "conversion finished:",
        ),
    )
    assert re.search(r"^  objective +masked LM \+ sentence order", joined, re.M)
    assert re.search(r"^  Hugging Face +not written \(hf\.mode: auto\): .*activation is geglu", joined, re.M)
    losses = [float(value) for value in re.findall(r"^step=\d+/40 loss=(\S+) lm_loss=", joined, re.M)]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5, losses  # masked LM + sentence order learn


def test_quickstart_t5_pipeline_runs_end_to_end(tmp_path):
    run, results, data = _run_quickstart("quickstart_t5", tmp_path)
    train_dir = results / "t5_tiny"
    for line in (
        f"training: {train_dir}",
        f"conversion: {train_dir}/convert_nemo",
        f"fine_tuning: {train_dir}/squad",
        f"evaluation: {train_dir}/squad_eval",
    ):
        assert line in run.stdout
    assert (train_dir / "convert_nemo" / "results" / "megatron_t5.nemo").exists()
    assert (train_dir / "squad" / "results" / "checkpoints" / "megatron_t5_squad.nemo").exists()
    # The generated SQuAD stand-in, in SQuAD's own format, where the real files would go.
    squad = json.loads((data / "squad_data" / "v1.1" / "dev-v1.1.json").read_text())
    assert len(squad["data"][0]["paragraphs"]) == 64

    logs = {path: path.read_text() for path in sorted(results.rglob("log-*.out"))}
    # download, extract, train_tokenizer, preprocess, training, conversion, fine-tuning, evaluation
    assert len(logs) == 8, sorted(logs)
    joined = _assert_quiet_and_informative(
        run.stdout + run.stderr,
        logs,
        megatron_jobs=4,
        summaries=(
            "train_tokenizer finished: 1 tokenizer done",
            "preprocess finished: 3 shards done",
            "training finished at step=40 of 40",
            "conversion finished:",
            "squad preparation finished: 2 files",
            "training finished at step=300 of 300",
            "evaluation finished:",
        ),
    )
    # The evaluation job's own scores: 8 colours make chance 12.5% exact match; the tuned tiny T5 answers by copying.
    scores = json.loads((train_dir / "squad_eval" / "results" / "qa_metrics.json").read_text())
    text = json.dumps(scores)
    exact_match = [float(value) for value in re.findall(r'"exact_match": ([0-9.]+)', text)]
    assert exact_match and min(exact_match) > 50.0, scores
    assert re.search(r"^squad +\d+\.\d+ +\d+\.\d+ +64$", joined, re.M)


# What Python prints for a warning: `<file>:<line>: UserWarning: <message>`, then the `warnings.warn(` source line.
_PYTHON_WARNING = re.compile(r"\w*Warning\b|warn\(")
ACCELERATORS_LINE = "optional accelerators absent:"


def _assert_quiet_and_informative(output: str, logs: dict, megatron_jobs: int, summaries) -> str:
    """Checks the output and the logs; returns the logs joined. summaries: the title each job's summary starts with."""
    for where, text in [("the quick start's output", output), *logs.items()]:
        noise = [line for line in text.splitlines() if _PYTHON_WARNING.search(line) or line.startswith("fatal:")]
        assert not noise, f"{where} shows warnings:\n" + "\n".join(noise[:20])
    for path, text in logs.items():
        assert text.count(ACCELERATORS_LINE) <= 1, f"{path} reports the absent accelerators more than once"
    joined = "\n".join(logs.values())
    # Each job on megatron-core (training, conversion, evaluation) says it once, if anything is absent.
    assert joined.count(ACCELERATORS_LINE) == (megatron_jobs if absent_accelerators() else 0)
    # Progress lines end with the time left; every job ends with a summary of what it produced.
    assert re.search(r"^step=40/40 loss=\S+ .* eta=0s$", joined, re.M)
    for title in summaries:
        assert re.search(rf"^{re.escape(title)}", joined, re.M), f"no summary starting {title!r} in the job logs"
    return joined
