"""The candidate program: it runs the program the manifest names for its item and leaves what happened in the
candidate's own directory; with --keep-going a failure lets the next candidate of a sequential job run."""

import json
import sys
import types

import pytest

from nemo_launcher.contract.autoconfig_search import CandidateRun, SearchManifest, failures_in, read_json
from nemo_launcher.jobs.autoconfig.candidate import failure_reason, main

from . import stand_in_programs


@pytest.fixture
def manifest(tmp_path, monkeypatch):
    """Three candidates whose programs are stand-ins: out of memory, exit 3, and a clean run."""
    for name in ("out_of_memory", "exits_three", "measures"):
        module = types.ModuleType(f"stand_in_{name}")
        module.main = getattr(stand_in_programs, name)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    for variable in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(variable, raising=False)
    runs = []
    for item, name in enumerate(("out_of_memory", "exits_three", "measures")):
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"name": name}))
        runs.append(CandidateRun(item, name, str(tmp_path / name), str(config), f"stand_in_{name}"))
    search = SearchManifest(
        "gpt3", "tiny", 1, 2, 8, 128, 3, 8, "gpt3/base", str(tmp_path / "conf"), str(tmp_path / "final"), [], runs
    )
    path = tmp_path / "search_manifest.json"
    path.write_text(search.to_json())
    return path, tmp_path


def test_out_of_memory_is_recorded_and_raised(manifest):
    path, root = manifest
    with pytest.raises(RuntimeError):
        main(["--manifest", str(path), "--item", "0"])
    (record,) = failures_in(root / "out_of_memory")
    assert record["reason"] == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert read_json(root / "out_of_memory" / "candidate_status.json")["state"] == "started"


def test_keep_going_records_the_failure_and_exits_0(manifest):
    path, root = manifest
    assert main(["--manifest", str(path), "--item", "0", "--keep-going"]) == 0
    assert read_json(root / "out_of_memory" / "candidate_status.json")["state"] == "failed"
    assert main(["--manifest", str(path), "--item", "1", "--keep-going"]) == 0
    (record,) = failures_in(root / "exits_three")
    assert record["reason"] == "error: the training program exited with status 3"


def test_a_slurm_array_task_runs_its_own_item(manifest, monkeypatch, capsys):
    path, root = manifest
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert main(["--manifest", str(path)]) == 0
    assert "trained measures" in capsys.readouterr().out
    assert read_json(root / "measures" / "candidate_status.json")["state"] == "finished"
    assert not failures_in(root / "measures") and not (root / "out_of_memory").exists()


def test_an_item_outside_the_manifest_is_refused(manifest, capsys):
    path, _ = manifest
    assert main(["--manifest", str(path), "--item", "7"]) == 2
    assert "candidate 7 is not in" in capsys.readouterr().err


def test_failure_reasons():
    assert failure_reason(MemoryError()).startswith("out of memory")
    assert failure_reason(ValueError("bad\nsecond line")) == "error: ValueError: bad"
