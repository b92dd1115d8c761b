"""A Base Command Platform training whose node count is `$NGC_ARRAY_SIZE`, as the seed's commands write it, run
through the script the launcher writes: a stand-in `bcprun` (tests/launch/test_backend_contract_bcp.py's, which
runs `--cmd` through a shell with the `--env` pairs, as bcprun does) starts the real training program, and the job
binds the number the replica's environment holds, or refuses it with the schema's own line."""

import json
import os
import sys

import pytest

from nemo_launcher.launch.app import run
from tests.jobs import warm_python
from tests.jobs.pipeline_support import SHORT_TRAINING
from tests.launch.backend_contract import write_tool
from tests.launch.conftest import compose_config
from tests.launch.test_backend_contract_bcp import BCPRUN


def _launch_on_bcp(tmp_path, data_dir, monkeypatch, replicas: int):
    """`python3 main.py ... cluster_type=bcp training.trainer.num_nodes=$NGC_ARRAY_SIZE` inside an NGC job of
    `replicas` replicas: the launcher writes the script and runs it here with bash, as on BCP."""
    bin_dir = tmp_path / "bin"
    write_tool(bin_dir, "bcprun", BCPRUN.format(python=sys.executable))
    (bin_dir / "python3").symlink_to(warm_python.interpreter())  # the job program, as bcprun's shell finds it
    for name, value in warm_python.environment(warm_python.job_environment(os.environ)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("BCPRUN_OUT", str(tmp_path / "bcprun.jsonl"))
    monkeypatch.setenv("NGC_ARRAY_SIZE", str(replicas))
    monkeypatch.delenv("NEMO_LAUNCHER_DEBUG", raising=False)
    words = [
        f"base_results_dir={tmp_path / 'results'}",
        f"data_dir={data_dir}",
        "cluster_type=bcp",
        "stages=[training]",
        "training=gpt3/tiny",
        "training.trainer.num_nodes=$NGC_ARRAY_SIZE",
        *SHORT_TRAINING,
        "training.trainer.max_steps=2",
        "training.exp_manager.checkpoint_callback_params.every_n_train_steps=2",
    ]
    cfg, choices = compose_config(words)
    return run(cfg, choices, ["main.py", *words])


def test_the_training_binds_the_replica_count_it_starts_with(tmp_path, sample_data_dir, monkeypatch, capfd):
    assert _launch_on_bcp(tmp_path, sample_data_dir, monkeypatch, replicas=1) == 0
    out, err = capfd.readouterr()
    (call,) = [json.loads(line) for line in (tmp_path / "bcprun.jsonl").read_text().splitlines()]
    assert call["options"]["--nnodes"] == "1"  # the script's "${NGC_ARRAY_SIZE}", expanded by its shell
    assert "this config accepts NGC_ARRAY_SIZE = 1, 2" in out
    (log,) = (tmp_path / "results").rglob("log-*.out")
    assert "Error" not in log.read_text(), log.read_text()[-3000:]
    assert list((tmp_path / "results").rglob("step-2*")), "the 2-step training saved its checkpoint"


def test_a_replica_count_the_config_cannot_split_over_is_refused_by_the_job(
    tmp_path, sample_data_dir, monkeypatch, capfd
):
    # The tiny GPT's global batch of 8 at micro-batch 4 splits over 1 or 2 data-parallel ranks, not 3.
    assert _launch_on_bcp(tmp_path, sample_data_dir, monkeypatch, replicas=3) != 0
    (log,) = (tmp_path / "results").rglob("log-*.out")
    text = log.read_text()
    assert "trainer.num_nodes" in text or "global_batch_size=8" in text, text[-3000:]
    assert "nodes(3)" in text, text[-3000:]
    assert not list((tmp_path / "results").rglob("step-*"))


@pytest.fixture(autouse=True)
def _no_stray_replica_count(monkeypatch):
    monkeypatch.delenv("NGC_ARRAY_SIZE", raising=False)
