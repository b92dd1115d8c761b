"""What the AutoConfigurator's launcher hands its two job programs: one JSON manifest of the search's runs, and the
small status files each candidate leaves in its own run directory. Standard library only (both sides read it).

    <logs>/training_logs/search_manifest.json   written by the launcher, never rewritten while the jobs run
    <run directory>/candidate_status.json       rank 0 of the candidate: started, then finished or failed
    <run directory>/candidate_failure.<rank>.json   any rank whose program raised or exited non-zero

A candidate is found by its `item` (its Slurm array index, or its position in a BCP/interactive job's command list)
and everything about it lives in its own directory, so the analysis never pairs results with runs by position.
"""

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_FILE = "search_manifest.json"
STATUS_FILE = "candidate_status.json"
FAILURE_PREFIX = "candidate_failure."


@dataclass(frozen=True)
class CandidateRun:
    item: int  # array index (Slurm) or command position (BCP, interactive)
    name: str  # e.g. gpt3_5b_16nodes_tp_2_pp_1_vp_0_cp_1_mbs_2_act_ckpt_0
    run_dir: str  # the candidate's exp_manager.explicit_log_dir: its measured_steps.json and status files
    config: str  # the resolved training config the launcher wrote for it
    program: str  # the family's training program module
    env: dict[str, str] = field(default_factory=dict)  # the training environment of this layout
    layout: dict[str, Any] = field(default_factory=dict)  # tp, pp, vp, cp, mbs, act_ckpt_layers
    overrides: dict[str, Any] = field(default_factory=dict)  # what it changes in the base config (training.<key>)
    predicted: dict[str, Any] = field(default_factory=dict)  # the performance model's step_time_s, memory, ...


@dataclass(frozen=True)
class SearchManifest:
    family: str
    size_label: str  # e.g. "5b"
    num_nodes: int | str  # a number, or "$NGC_ARRAY_SIZE" on BCP (known when the job starts)
    gpus_per_node: int
    global_batch_size: int
    seq_length: int
    output_top_n: int
    max_steps_per_run: int
    base_config: str  # the base config's name in the training group, e.g. gpt3/base_cfg_5b
    conf_dir: str  # <logs>/conf: give it to main.py as --config-dir to train a config written there
    final_result: str  # <logs>/final_result
    launcher_settings: list[str]  # the main.py overrides the search ran with (cluster_type, data_dir, ...)
    runs: list[CandidateRun]
    launcher_scripts_path: str = ""  # where main.py is, for the training command
    train_optimal_config: bool = False  # the analysis job runs the training command of the winner itself

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def read_manifest(path) -> SearchManifest:
    values = json.loads(Path(path).read_text())
    runs = [CandidateRun(**run) for run in values.pop("runs")]
    return SearchManifest(**values, runs=runs)


def write_status(run_dir, record: Mapping[str, Any], name: str = STATUS_FILE) -> None:
    """Replaces the file in one rename, so a reader never sees half of it."""
    path = Path(run_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(dict(record), sort_keys=True) + "\n")
    os.replace(partial, path)


def read_json(path) -> dict[str, Any] | None:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def failures_in(run_dir) -> list[dict[str, Any]]:
    """Every rank's failure record in `run_dir`, rank order."""
    found = [read_json(path) for path in sorted(Path(run_dir).glob(f"{FAILURE_PREFIX}*.json"))]
    return [record for record in found if record is not None]
