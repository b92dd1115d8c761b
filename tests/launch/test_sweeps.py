"""`-m` sweeps as users run them: each point its own run names and directories, or the sweep is refused before
its first point is submitted."""

import os
import subprocess
import sys

from nemo_launcher.launch.resolvers import REPO_ROOT
from nemo_launcher.launch.sweeps import Sweep


def _main(args, **env):
    environ = dict(os.environ, NEMO_LAUNCHER_DEBUG="1", **env)
    return subprocess.run(
        [sys.executable, "main.py", "-m", *args], cwd=REPO_ROOT, env=environ, capture_output=True, text=True
    )


def _written(root):
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() and "multirun" not in p.parts}


def test_each_point_gets_its_own_run_name_and_directory(tmp_path):
    result = _main(
        [
            "stages=[training,conversion]",
            "training=gpt3/126m",
            "training.model.micro_batch_size=1,2",
            f"base_results_dir={tmp_path}",
        ]
    )
    assert result.returncode == 0, result.stderr
    one, two = tmp_path / "gpt3_126m-micro_batch_size_1", tmp_path / "gpt3_126m-micro_batch_size_2"
    assert (one / "gpt3_126m-micro_batch_size_1_hydra.yaml").is_file() and (
        two / "gpt3_126m-micro_batch_size_2_hydra.yaml"
    ).is_file()
    assert "micro_batch_size: 1" in (one / "gpt3_126m-micro_batch_size_1_hydra.yaml").read_text()
    assert "micro_batch_size: 2" in (two / "gpt3_126m-micro_batch_size_2_hydra.yaml").read_text()
    # Conversion follows its training run: one suffix, not two, and inside that run's directory.
    assert (one / "convert_nemo" / "convert_gpt3_126m-micro_batch_size_1_hydra.yaml").is_file()
    files = _written(tmp_path)
    assert {f.parts[0] for f in files} == {one.name, two.name}
    assert (
        "job-name=nemo-megatron-gpt3_126m-micro_batch_size_2"
        in (two / "nemo-megatron-gpt3_126m-micro_batch_size_2_submission.sh").read_text()
    )


def test_config_group_sweeps_keep_their_own_names(tmp_path):
    result = _main(["stages=[training]", "training=gpt3/126m,gpt3/5b", f"base_results_dir={tmp_path}"])
    assert result.returncode == 0, result.stderr
    assert {f.parts[0] for f in _written(tmp_path)} == {"gpt3_126m", "gpt3_5b"}


def test_points_that_would_share_a_directory_are_refused_before_any_is_written(tmp_path):
    result = _main(
        ["stages=[conversion]", "conversion.model.tensor_model_parallel_size=1,2", f"base_results_dir={tmp_path}"]
    )
    assert result.returncode == 2
    assert "sweep points 0" in result.stderr and "would both write here" in result.stderr
    assert not _written(tmp_path)


def test_one_bad_point_refuses_the_whole_sweep(tmp_path):
    result = _main(
        [
            "stages=[training]",
            "training=gpt3/126m",
            "training.model.micro_batch_size=1,3",
            f"base_results_dir={tmp_path}",
        ]
    )
    assert result.returncode == 2
    assert "sweep point 1" in result.stderr and "micro_batch_size(3)" in result.stderr
    assert not _written(tmp_path)


def test_a_sweep_that_prepares_data_is_refused(tmp_path):
    result = _main(
        [
            "stages=[data_preparation,training]",
            "training=gpt3/126m",
            "training.model.micro_batch_size=1,2",
            f"base_results_dir={tmp_path}",
        ]
    )
    assert result.returncode == 2 and "stages=[data_preparation] once" in result.stderr
    assert not _written(tmp_path)


def test_long_suffixes_fall_back_to_point_numbers():
    points = (("a.b.c=" + "x" * 70,), ("a.b.c=y",))
    sweep = Sweep(0, "config", points, ("a.b.c",))
    assert sweep.suffix(points[0]) == "p0" and sweep.suffix(points[1]) == "p1"
    short = Sweep(0, "config", (("m.lr=1e-4", "m.x=a/b"), ("m.lr=3e-4", "m.x=a/b")), ("m.lr", "m.x"))
    assert short.suffix(short.points[0]) == "lr_1e-4-x_a_b"
