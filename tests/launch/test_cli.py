"""main.py as users run it: Hydra's --help, --cfg job, -m sweeps and a dry run on a machine without Slurm."""

import os
import subprocess
import sys

from nemo_launcher.launch.resolvers import REPO_ROOT


def _main(args, tmp_path, **env):
    environ = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "main.py", *args], cwd=REPO_ROOT, env=environ, capture_output=True, text=True
    )


def test_help_lists_groups(tmp_path):
    result = _main(["--help"], tmp_path)
    assert result.returncode == 0
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["training", "gpt3:", "126m,", "175b,"] in [row[:4] for row in rows]
    assert ["env_preset", "aws,", "azure,", "none*,", "oci"] in rows
    assert "_family" not in result.stdout


def test_cfg_job_prints_composed_config(tmp_path):
    result = _main(["--cfg", "job", "stages=[training]", "training=gpt3/5b"], tmp_path)
    assert result.returncode == 0
    assert "num_attention_heads: 32" in result.stdout and "cluster_type: bcm" in result.stdout


def test_sweep_submits_one_pipeline_per_point(tmp_path):
    result = _main(
        ["-m", "stages=[training]", "training=gpt3/126m,gpt3/5b", f"base_results_dir={tmp_path}"],
        tmp_path,
        NEMO_LAUNCHER_DEBUG="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Pipeline, dry run") == 2
    assert (tmp_path / "gpt3_126m" / "nemo-megatron-gpt3_126m_submission.sh").exists()
    assert (tmp_path / "gpt3_5b" / "nemo-megatron-gpt3_5b_submission.sh").exists()


def test_dry_run_without_slurm_and_error_exit_code(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    path = f"{empty}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    path = ":".join(p for p in path.split(":") if not os.path.exists(os.path.join(p, "sbatch")))
    ok = _main(
        ["stages=[training]", "training=gpt3/5b", f"base_results_dir={tmp_path}/r"],
        tmp_path,
        NEMO_LAUNCHER_DEBUG="true",
        PATH=path,
    )
    assert ok.returncode == 0, ok.stderr
    bad = _main(
        [
            "stages=[training]",
            "training=gpt3/5b",
            "training.model.tensor_model_parallel_size=3",
            f"base_results_dir={tmp_path}/bad",
        ],
        tmp_path,
        NEMO_LAUNCHER_DEBUG="1",
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("Error: training.model.tensor_model_parallel_size=3")
    assert not (tmp_path / "bad").exists()
    no_slurm = _main(
        ["stages=[training]", "training=gpt3/5b", "check_inputs=false", f"base_results_dir={tmp_path}/n"],
        tmp_path,
        PATH=path,
    )
    assert no_slurm.returncode == 1 and "NEMO_LAUNCHER_DEBUG=1" in no_slurm.stderr


def test_launch_side_never_imports_torch(tmp_path):
    probe = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('HEAVY', "
        "sorted(m for m in ('torch', 'megatron', 'numpy', 'jinja2') if m in sys.modules)))\n"
        f"sys.argv = ['main.py', 'stages=[training]', 'training=gpt3/5b', 'base_results_dir={tmp_path}']\n"
        "runpy.run_path('main.py', run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, NEMO_LAUNCHER_DEBUG="1"),
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
