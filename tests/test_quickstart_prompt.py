"""The prompt-learning quick starts end to end on this CPU, every path at its default: python3 main.py
--config-name=quickstart_prompt prepares the tiny Pile, trains and converts the tiny GPT, p-tunes the frozen
megatron_gpt.nemo on generated SQuAD-format questions and scores its answers (evaluation=prompt_gpt3/squad);
--config-name=quickstart_t5_prompt does the same with the tiny T5 (evaluation=prompt_t5/squad)."""

import json
import os
import subprocess
import sys

import pytest

from nemo_launcher.jobs.common.qa_metrics import squad_scores
from nemo_launcher.launch.resolvers import REPO_ROOT

# (config name, the tiny training run, the conversion's .nemo, prompt learning's result)
QUICK_STARTS = [
    ("quickstart_prompt", "gpt3_tiny", "megatron_gpt.nemo", "megatron_gpt_prompt.nemo"),
    ("quickstart_t5_prompt", "t5_tiny", "megatron_t5.nemo", "megatron_t5_prompt.nemo"),
]


@pytest.mark.parametrize("config, train_name, nemo, prompt_nemo", QUICK_STARTS, ids=[q[0] for q in QUICK_STARTS])
def test_prompt_learning_pipeline_runs_end_to_end_with_default_paths(config, train_name, nemo, prompt_nemo, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    run = subprocess.run(
        [sys.executable, "main.py", f"--config-name={config}", f"base_results_dir={results}", f"data_dir={data}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    train = results / train_name
    assert (train / "convert_nemo" / "results" / nemo).exists()
    assert (train / "prompt_learning_squad" / "results" / prompt_nemo).exists()
    assert len((data / "prompt_data" / "v1.1" / "squad_train.jsonl").read_text().splitlines()) == 512
    eval_dir = train / "eval_prompt_squad" / "results"
    predictions = [json.loads(line) for line in (eval_dir / "squad_test_predictions.jsonl").read_text().splitlines()]
    scores = json.loads((eval_dir / "qa_metrics.json").read_text())
    assert len(predictions) == 32 and all(p["taskname"] == "squad" for p in predictions)
    assert scores == {
        "squad_test": squad_scores([p["prediction"] for p in predictions], [p["answers"] for p in predictions])
    }
    logs = {path: path.read_text() for path in sorted(train.rglob("log-*.out"))}
    assert len(logs) == 4, sorted(logs)  # training, conversion, prompt learning, evaluation
    for path, text in logs.items():
        assert "Warning" not in text and "Traceback" not in text, (path, text[-2000:])
    assert "evaluation finished:" in run.stdout + "".join(logs.values())
