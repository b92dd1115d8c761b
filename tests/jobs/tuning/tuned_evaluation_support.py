"""The launcher's resolved config for a tuned-model evaluation (evaluation=<method>_<family>/squad) and a run of its
program, for the GPT and T5 tuned-evaluation tests.

    config, section = launcher_config(tmp_path, "ia3_t5/squad", 4, "evaluation.model.language_model_path=...")
    stdout, predictions, metrics = evaluate(config, "nemo_launcher.jobs.t5.evaluate_tuned")
    check_scores(predictions, metrics, read_lines(test_file))
"""

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.jobs.gpt_train_support import REPO, command, environment


def launcher_config(tmp_path, choice: str, tokens: int, *overrides):
    """The resolved evaluation config main.py writes for `choice` (a dry run), fp32, `tokens` tokens per answer."""
    results = tmp_path / "results"
    env = dict(environment(), NEMO_LAUNCHER_DEBUG="1")
    done = subprocess.run(
        [
            sys.executable,
            "main.py",
            "stages=[evaluation]",
            f"evaluation={choice}",
            "cluster_type=interactive",
            f"base_results_dir={results}",
            "evaluation.model.precision=32",
            f"evaluation.model.tokens_to_generate={tokens}",
            *overrides,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (config,) = results.rglob("*_hydra.yaml")
    return config, yaml.safe_load(config.read_text())


def evaluate(config: Path, program: str, processes: int = 1, test_name: str = "colors_test"):
    """(stdout, predictions, qa_metrics.json) of the program on `config`; it must finish without a warning."""
    done = subprocess.run(
        command(config, processes, (program,)), cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Warning" not in done.stderr and "warn" not in done.stdout.lower(), done.stderr[-2000:]
    assert "evaluation finished" in done.stdout
    results = Path(yaml.safe_load(config.read_text())["run"]["results_dir"]) / "results"
    predictions = [json.loads(line) for line in (results / f"{test_name}_predictions.jsonl").read_text().splitlines()]
    return done.stdout, predictions, json.loads((results / "qa_metrics.json").read_text())


def read_lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def check_scores(predictions, metrics, lines, name: str = "colors_test"):
    """Each prediction carries its line's answers, and the scores are SQuAD's on the predictions."""
    from nemo_launcher.jobs.common.qa_metrics import squad_scores

    assert [p["answers"] for p in predictions] == [line["answers"] for line in lines]
    assert metrics == {name: squad_scores([p["prediction"] for p in predictions], [p["answers"] for p in predictions])}
