"""The README's main job, end to end on this CPU: python3 main.py --config-name=quickstart."""
import json
import os
import subprocess
import sys

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
