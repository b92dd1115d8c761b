"""The seed's AutoConfigurator command for Base Command Platform, run as printed (seed 001, 5.3.2.2.3.2).

Bash reads it as a user's shell inside the NGC job would: `$NGC_ARRAY_SIZE` is the job's replica count there, so
the shell expands it before Python sees it. Only the folders it names are placed here, as a user's machine holds
them: the seed's /opt/NeMo-Megatron-Launcher/auto_configurator is this repository's, /mount a tmp folder. With
NEMO_LAUNCHER_DEBUG=1 it writes the search's scripts and submits nothing.
"""

import os
import subprocess

from .support import APP_DIR

SEED_COMMAND = (
    "python3 /opt/NeMo-Megatron-Launcher/auto_configurator/main.py search_config=gpt3/0.126b "
    "run_inference_hp_search=False auto_configurator_path=/opt/NeMo-Megatron-Launcher/auto_configurator "
    "data_dir=/mount/data/the_pile_gpt3 base_results_dir=/mount/results/auto_configurator "
    "search_config.train_settings.num_nodes=$NGC_ARRAY_SIZE cluster_type=bcp"
)


def _placed(command: str, mount) -> str:
    return command.replace("/opt/NeMo-Megatron-Launcher/auto_configurator", str(APP_DIR)).replace(
        "/mount/", f"{mount}/"
    )


def test_the_seed_bcp_example_dry_runs_as_printed(tmp_path):
    mount = tmp_path / "mount"
    env = dict(os.environ, NEMO_LAUNCHER_DEBUG="1", NGC_ARRAY_SIZE="2")
    result = subprocess.run(
        ["bash", "-c", _placed(SEED_COMMAND, mount)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    logs = mount / "results" / "auto_configurator" / "gpt3" / "0.126b_80gb"
    assert (logs / "base_cfg_0.126b.yaml").exists()
    assert "Pipeline, dry run" in result.stdout
    (script,) = (logs / "training_logs").glob("*_submission.sh")
    text = script.read_text()
    # BCP has no arrays: the candidates run one after another on the job's 2 replicas, 8 processes each.
    launched = [line for line in text.splitlines() if line.startswith("bcprun ")]
    assert len(launched) >= 2 and all("--nnodes 2 --npernode 8" in line for line in launched)
    assert all("--keep-going" in line for line in launched)
    assert "nemo_launcher.jobs.autoconfig.candidate" in text
    (analysis,) = (logs / "final_result").glob("*_submission.sh")
    assert "nemo_launcher.jobs.autoconfig.analysis" in analysis.read_text()
    assert len(list((logs / "candidate_configs").glob("gpt3_0.126b_2nodes_*.yaml"))) >= len(launched)


def test_outside_an_ngc_job_the_empty_node_count_is_refused(tmp_path):
    """Typed where NGC_ARRAY_SIZE is not set, the shell passes an empty value: one line, exit 2, nothing written."""
    mount = tmp_path / "mount"
    env = {k: v for k, v in os.environ.items() if k != "NGC_ARRAY_SIZE"} | {"NEMO_LAUNCHER_DEBUG": "1"}
    result = subprocess.run(
        ["bash", "-c", _placed(SEED_COMMAND, mount)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Error: search_config.train_settings.num_nodes=")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not mount.exists()
