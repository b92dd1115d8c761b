"""Checkpoints that prove themselves, on folders of plain files (no torch): the sizes and CRC-32s a save records in
its COMPLETE marker, the check before a resume, the fallback to the newest checkpoint that verifies, and what a run
does when none does (exp_manager.on_all_checkpoints_damaged). The launcher refuses a bad value of that key at launch.
The same faults in a real training: tests/jobs/gpt/test_checkpoint_damage.py."""

import json
import types
import zlib

import pytest

from nemo_launcher.contract import RESUME_MARKER
from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.jobs.common.report import print_error
from nemo_launcher.jobs.core import checkpoint_manifest
from nemo_launcher.jobs.core.checkpoints import FILES_KEY, MARKER, CheckpointFolder
from nemo_launcher.jobs.core.resume import DamagedCheckpoints, resume_path

# What torch.distributed.checkpoint and megatron-core write for two ranks, with distinct contents.
FILES = {
    "__0_0.distcp": b"rank zero weights " * 64,
    "__0_1.distcp": b"rank zero optimizer " * 64,
    "__1_0.distcp": b"rank one weights " * 64,
    ".metadata": b"tensor index",
    "common.pt": b"step and rng",
    "metadata.json": b'{"sharded_backend": "torch_dist"}',
}


def save(folder: CheckpointFolder, step: int, record: bool = True) -> None:
    """A complete checkpoint as the trainer writes it: files, then the marker with their record (or, `record`
    false, a marker as saves wrote it before files were recorded)."""
    path = folder.prepare(step)
    for name, content in FILES.items():
        (path / name).write_bytes(content + str(step).encode())
    info = {"step": step}
    if record:
        info[FILES_KEY] = checkpoint_manifest.merged(checkpoint_manifest.record(path, rank, 2) for rank in (0, 1))
    folder.mark_complete(step, info)


def exp_manager(tmp_path, **changes):
    """The keys resume_path reads, with the schema's defaults."""
    keys = {
        "explicit_log_dir": str(tmp_path),
        "resume_if_exists": True,
        "resume_ignore_no_checkpoint": True,
        "on_all_checkpoints_damaged": "fail",
    }
    return types.SimpleNamespace(**{**keys, **changes})


@pytest.fixture
def folder(tmp_path):
    checkpoints = CheckpointFolder(tmp_path / "checkpoints")
    for step in (10, 20, 30):
        save(checkpoints, step)
    return checkpoints


# ---- the record ---------------------------------------------------------------------------------------
def test_the_marker_records_every_file_with_its_size_and_crc32_split_by_the_rank_that_wrote_it(folder):
    path = folder.path(30)
    assert checkpoint_manifest.record(path, 1, 2) == {
        "__1_0.distcp": {
            "bytes": len(FILES["__1_0.distcp"]) + 2,
            "crc32": f"{zlib.crc32(FILES['__1_0.distcp'] + b'30'):08x}",
        }
    }
    # Rank 0 takes its own shards and every file no rank's name claims; the marker holds them all.
    assert sorted(checkpoint_manifest.record(path, 0, 2)) == [
        ".metadata",
        "__0_0.distcp",
        "__0_1.distcp",
        "common.pt",
        "metadata.json",
    ]
    files = folder.read_info(path)[FILES_KEY]
    assert sorted(files) == sorted(FILES) and MARKER not in files
    assert all(files[name]["bytes"] == (path / name).stat().st_size for name in files)
    # Resumed with one process, the lone rank checks the shards of both.
    assert checkpoint_manifest.owner("__1_0.distcp", 1) == 0 and checkpoint_manifest.owner("__3_0.distcp", 2) == 1


@pytest.mark.parametrize(
    "damage,expected",
    [
        (
            lambda p: p.write_bytes(p.read_bytes()[:100]),
            f"__1_0.distcp: size 100 instead of {len(FILES['__1_0.distcp']) + 2} bytes",
        ),
        (lambda p: p.unlink(), "__1_0.distcp: missing"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:16] + bytes(32) + p.read_bytes()[48:]),
            "__1_0.distcp: checksum differs (crc32 ",
        ),
    ],
    ids=["truncated", "missing", "zeroed"],
)
def test_a_damaged_file_is_named_with_what_is_wrong_by_the_rank_that_owns_it(folder, damage, expected):
    path = folder.path(30)
    damage(path / "__1_0.distcp")
    files = folder.read_info(path)[FILES_KEY]
    assert checkpoint_manifest.check(path, files, 0, 2) == []  # rank 0 does not read rank 1's shards
    (problem,) = checkpoint_manifest.check(path, files, 1, 2)
    assert problem.startswith(expected), problem
    # Both ranks learn it: each checks its share, the gather hands every share to every rank.
    assert folder.damage(path, 0, 2, lambda mine: [mine, checkpoint_manifest.check(path, files, 1, 2)]) == [problem]


def test_a_file_the_save_did_not_record_is_not_judged(folder):
    (folder.path(30) / "notes.txt").write_text("added by hand")
    assert folder.damage(folder.path(30)) == []


# ---- the choice of a resume ---------------------------------------------------------------------------
def test_a_damaged_newest_checkpoint_is_set_aside_with_one_warning_and_the_run_resumes_from_the_one_before(
    folder, tmp_path
):
    newest = folder.path(30)
    (newest / "common.pt").unlink()
    shard = newest / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-1])
    saved = len(FILES["__0_0.distcp"] + b"30")
    warnings = []
    assert resume_path(folder, exp_manager(tmp_path), warn=warnings.append) == folder.path(20)
    assert warnings == [
        f"checkpoint step-30 is damaged ({newest / '__0_0.distcp'}: size {saved - 1} instead of {saved} bytes; "
        f"{newest / 'common.pt'}: missing); set aside as step-30.damaged, resuming from step-20"
    ]
    # Out of every listing, its files kept for a look; the next save of step 30 writes a new folder.
    assert folder.steps() == [10, 20] and (folder.root / "step-30.damaged" / ".metadata").is_file()
    assert resume_path(folder, exp_manager(tmp_path), warn=warnings.append) == folder.path(20) and len(warnings) == 1


def test_a_marker_from_before_file_records_is_trusted_and_a_damaged_marker_is_damage(tmp_path):
    folder = CheckpointFolder(tmp_path / "checkpoints")
    save(folder, 10, record=False)
    save(folder, 20)
    (folder.path(10) / "common.pt").unlink()  # nothing recorded says it was there
    (folder.path(20) / MARKER).write_text('["not", "a", "record"]')
    # Every rank reads the marker; what two ranks both found is said once.
    (unreadable,) = folder.damage(folder.path(20), 1, 2, lambda mine: [mine, mine])
    warnings = []
    assert resume_path(folder, exp_manager(tmp_path), warn=warnings.append) == folder.path(10)
    assert unreadable in warnings[0] and warnings == [
        f"checkpoint step-20 is damaged ({folder.path(20) / MARKER}: unreadable (AttributeError: 'list' object has "
        "no attribute 'get')); set aside as step-20.damaged, resuming from step-10"
    ]


def test_with_every_checkpoint_damaged_the_job_exits_74_in_one_line_and_is_not_requeued(folder, tmp_path, capsys):
    (tmp_path / RESUME_MARKER).write_text("left by an attempt that stopped on SIGUSR1\n")
    for step in (10, 20, 30):
        (folder.path(step) / ".metadata").unlink()
    with pytest.raises(DamagedCheckpoints) as refusal:
        resume_path(folder, exp_manager(tmp_path), warn=pytest.fail)
    assert print_error(refusal.value) == 74
    line = capsys.readouterr().err
    assert line == (
        "Error: every complete checkpoint differs from what its save recorded ("
        + "; ".join(f"step-{s}: {folder.path(s) / '.metadata'}: missing" for s in (30, 20, 10))
        + "). Restore the damaged files from a copy and submit again, or set "
        "exp_manager.on_all_checkpoints_damaged=start_over to set them aside and train from step 0\n"
    )
    assert folder.steps() == [10, 20, 30] and not (tmp_path / RESUME_MARKER).exists()  # left as found, no requeue
    # Rank 1 owns none of the missing files: it learns of them from rank 0's share, and stops with the same code in
    # silence (rank 0 speaks for the job).
    with pytest.raises(DamagedCheckpoints) as quiet:
        resume_path(
            folder, exp_manager(tmp_path), rank=1, world_size=2, gather=lambda mine: [[".metadata: missing"], mine]
        )
    assert quiet.value.echo is False


def test_start_over_when_allowed_sets_every_damaged_checkpoint_aside(folder, tmp_path):
    for step in (10, 20, 30):
        shard = folder.path(step) / "__0_1.distcp"
        shard.write_bytes(bytes(shard.stat().st_size))
    warnings = []
    allowed = exp_manager(tmp_path, on_all_checkpoints_damaged="start_over", resume_ignore_no_checkpoint=False)
    assert resume_path(folder, allowed, warn=warnings.append) is None
    assert [w.split(" (")[0] for w in warnings] == [f"checkpoint step-{s} is damaged" for s in (30, 20, 10)]
    assert all(w.endswith("starting over (exp_manager.on_all_checkpoints_damaged: start_over)") for w in warnings)
    assert "checksum differs (crc32 " in warnings[0]
    assert folder.steps() == [] and sorted(p.name for p in folder.root.iterdir()) == [
        "step-10.damaged",
        "step-20.damaged",
        "step-30.damaged",
    ]


def test_no_checkpoint_at_all_is_still_told_apart_from_damaged_ones(tmp_path):
    empty = CheckpointFolder(tmp_path / "checkpoints")
    assert resume_path(empty, exp_manager(tmp_path)) is None
    with pytest.raises(JobConfigError, match="resume_ignore_no_checkpoint: false, and .* holds no complete"):
        resume_path(empty, exp_manager(tmp_path, resume_ignore_no_checkpoint=False))
    save(empty, 10)
    (empty.path(10) / "common.pt").unlink()
    assert resume_path(empty, exp_manager(tmp_path, resume_if_exists=False)) is None  # not even looked at
    assert empty.steps() == [10]


# ---- the key, at launch -------------------------------------------------------------------------------
def test_the_launcher_refuses_a_value_of_the_key_the_job_would_refuse(tmp_path, monkeypatch, capsys):
    from tests.launch.conftest import run_launcher

    monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", "1")
    key = "training.exp_manager.on_all_checkpoints_damaged"
    assert run_launcher(["stages=[training]", "training=gpt3/tiny", f"{key}=restart"], tmp_path / "results") == 2
    err = capsys.readouterr().err
    assert f"{key}='restart': choose one of fail, start_over" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "results").exists()
    assert run_launcher(["stages=[training]", "training=gpt3/tiny", f"{key}=start_over"], tmp_path / "results") == 0
    written = json.dumps(
        __import__("yaml").safe_load((tmp_path / "results/gpt3_tiny/gpt3_tiny_hydra.yaml").read_text())
    )
    assert '"on_all_checkpoints_damaged": "start_over"' in written
