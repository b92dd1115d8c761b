"""A damaged newest checkpoint, met by the real GPT training program: the session's `tiny_pipeline` training
(conftest.py: 4 steps, saved at 2 and 4) copied, damaged as files get damaged (a truncated shard, a lost .metadata,
zeroed bytes inside a shard), and the same training run again on the copy. The rerun warns in one line naming the
file and resumes from step 2; with every checkpoint damaged it exits 74 in one line, or starts over when
exp_manager.on_all_checkpoints_damaged allows it.
Unit tests of the rules: tests/jobs/core/test_checkpoint_verification.py."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.jobs.gpt_train_support import REPO, command, environment


def truncate(step_dir: Path) -> str:
    shard = step_dir / "__0_0.distcp"
    saved = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: saved // 2])
    return f"{shard}: size {saved // 2} instead of {saved} bytes"


def lose_metadata(step_dir: Path) -> str:
    (step_dir / ".metadata").unlink()
    return f"{step_dir / '.metadata'}: missing"


def zero_bytes(step_dir: Path) -> str:
    """4 KiB of zeros in the middle of a shard: same size, so only the checksum can tell."""
    shard = step_dir / "__0_1.distcp"
    content = bytearray(shard.read_bytes())
    middle = len(content) // 2
    content[middle : middle + 4096] = bytes(4096)
    shard.write_bytes(bytes(content))
    return f"{shard}: checksum differs (crc32 "


def copy_of_the_run(tiny_pipeline, work: Path, *overrides: str) -> tuple[Path, Path]:
    """The tiny pipeline's training config and checkpoints, copied under `work` (the copy's log dir and results dir
    moved there; `overrides`: `<exp_manager key>=<value>`, set as a user editing the file would). Returns (config,
    checkpoints folder)."""
    run, _ = tiny_pipeline
    training = yaml.safe_load(run.configs["training"].read_text())
    log_dir = work / "results"
    shutil.copytree(Path(training["exp_manager"]["explicit_log_dir"]) / "checkpoints", log_dir / "checkpoints")
    training["exp_manager"]["explicit_log_dir"] = str(log_dir)
    training["run"]["results_dir"] = str(work)
    for override in overrides:
        key, value = override.split("=", 1)
        training["exp_manager"][key] = value
    config = work / "training.yaml"
    config.write_text(yaml.safe_dump(training))
    return config, log_dir / "checkpoints"


def rerun(config: Path, module: str = "nemo_launcher.jobs.gpt.train") -> subprocess.CompletedProcess:
    """A job program (the training by default) as its script starts it, whatever its exit status."""
    return subprocess.run(
        command(config, program=(module,)), cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("damage", [truncate, lose_metadata, zero_bytes], ids=["truncated", "no_metadata", "zeroed"])
def test_a_damaged_newest_checkpoint_is_named_in_one_warning_and_the_run_resumes_from_the_one_before(
    tiny_pipeline, tmp_path, damage
):
    config, checkpoints = copy_of_the_run(tiny_pipeline, tmp_path)
    what = damage(checkpoints / "step-4")
    result = rerun(config)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "is damaged" in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0], output[-3000:]
    assert f"checkpoint step-4 is damaged ({what}" in warnings[0]
    assert warnings[0].endswith("set aside as step-4.damaged, resuming from step-2")
    assert f"resuming from {checkpoints / 'step-2'}" in result.stdout and "Traceback" not in output
    assert re.search(r"^  steps +2 this attempt \(resumed from step 2\)$", result.stdout, re.M), result.stdout
    assert "training finished at step=4 of 4" in result.stdout
    assert (checkpoints / "step-4" / "COMPLETE").is_file() and (checkpoints / "step-4.damaged").is_dir()


def test_with_only_damaged_checkpoints_the_job_exits_74_in_one_line_or_starts_over_when_allowed(
    tiny_pipeline, tmp_path
):
    config, checkpoints = copy_of_the_run(tiny_pipeline, tmp_path)
    truncated, lost = truncate(checkpoints / "step-4"), lose_metadata(checkpoints / "step-2")
    refused = rerun(config)
    assert refused.returncode == 74, refused.stderr[-3000:]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert errors == refused.stderr.strip().splitlines()[-1:] and "Traceback" not in refused.stderr
    assert errors[0] == (
        f"Error: every complete checkpoint differs from what its save recorded (step-4: {truncated}; step-2: {lost})."
        " Restore the damaged files from a copy and submit again, or set exp_manager.on_all_checkpoints_damaged="
        "start_over to set them aside and train from step 0"
    )
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-2", "step-4"]  # left as they were

    allowed, again = copy_of_the_run(tiny_pipeline, tmp_path / "allowed", "on_all_checkpoints_damaged=start_over")
    truncate(again / "step-4"), lose_metadata(again / "step-2")
    started = rerun(allowed)
    assert started.returncode == 0, started.stderr[-3000:]
    output = started.stdout + started.stderr
    assert [line.split(" is damaged")[0][-17:] for line in output.splitlines() if " is damaged " in line] == [
        "checkpoint step-4",
        "checkpoint step-2",
    ]
    assert "starting over (exp_manager.on_all_checkpoints_damaged: start_over)" in output
    assert "starting from scratch" in started.stdout and re.search(r"^  steps +4 this attempt$", started.stdout, re.M)
    assert sorted(p.name for p in again.iterdir()) == ["step-2", "step-2.damaged", "step-4", "step-4.damaged"]


def test_a_conversion_of_a_damaged_checkpoint_stops_with_74_instead_of_converting_an_older_one(tiny_pipeline, tmp_path):
    run, _ = tiny_pipeline
    _, checkpoints = copy_of_the_run(tiny_pipeline, tmp_path)
    truncated = truncate(checkpoints / "step-4")
    conversion = yaml.safe_load(run.configs["conversion"].read_text())
    conversion["model"]["checkpoint_folder"] = str(checkpoints)
    conversion["run"]["results_dir"] = str(tmp_path / "convert_nemo")
    conversion["hf"]["output_dir"] = str(tmp_path / "convert_nemo" / "results" / "hf")
    config = tmp_path / "conversion.yaml"
    config.write_text(yaml.safe_dump(conversion))

    refused = rerun(config, "nemo_launcher.jobs.gpt.convert")
    assert refused.returncode == 74, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: model.checkpoint_name: {checkpoints / 'step-4'} differs from what its save recorded ({truncated}); "
        "restore those files from a copy, or convert another complete checkpoint (model.checkpoint_name; complete "
        "ones: step-2)"
    )
    assert "Traceback" not in refused.stderr and not list((tmp_path / "convert_nemo").glob("**/*.nemo"))
