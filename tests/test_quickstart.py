"""The README's main job, end to end on this CPU: python3 main.py --config-name=quickstart.

It runs once (about a minute), so every check of what the quick start shows a user is made here: the
results, and that the output and every job log are free of Python warnings and end with a summary.
"""
import json
import os
import re
import subprocess
import sys

from nemo_launcher.jobs.common.quiet import absent_accelerators
from nemo_launcher.launch.resolvers import REPO_ROOT


def test_quickstart_pipeline_runs_end_to_end(tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    run = subprocess.run(
        [sys.executable, "main.py", "--config-name=quickstart", f"base_results_dir={results}", f"data_dir={data}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
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
    _assert_quiet_and_informative(run.stdout + run.stderr, logs)


# What Python prints for a warning: `<file>:<line>: UserWarning: <message>`, then the `warnings.warn(` source line.
_PYTHON_WARNING = re.compile(r"\w*Warning\b|warn\(")
ACCELERATORS_LINE = "optional accelerators absent:"


def _assert_quiet_and_informative(output: str, logs: dict) -> None:
    for where, text in [("the quick start's output", output), *logs.items()]:
        noise = [line for line in text.splitlines() if _PYTHON_WARNING.search(line) or line.startswith("fatal:")]
        assert not noise, f"{where} shows warnings:\n" + "\n".join(noise[:20])
    for path, text in logs.items():
        assert text.count(ACCELERATORS_LINE) <= 1, f"{path} reports the absent accelerators more than once"
    joined = "\n".join(logs.values())
    # Training, conversion and evaluation use megatron-core, so each says it once, if anything is absent.
    assert joined.count(ACCELERATORS_LINE) == (3 if absent_accelerators() else 0)
    # Progress lines end with the time left; every job ends with a summary of what it produced.
    assert re.search(r"^step=40/40 loss=\S+ .* eta=0s$", joined, re.M)
    for title in ("download finished: 3 shards done", "extract finished: 3 shards done",
                  "preprocess finished: 3 shards done", "training finished at step=40 of 40",
                  "conversion finished:", "evaluation finished:"):
        assert re.search(rf"^{re.escape(title)}", joined, re.M), f"no summary starting {title!r} in the job logs"
    assert re.search(r"^  tokens +58\.1k$", joined, re.M)  # preprocess: the three shards' tokens
    assert re.search(r"^  lambada +.*perplexity \S+ ± \S+", joined, re.M)
