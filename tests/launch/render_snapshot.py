"""Renders every config of every stage group on every backend into a folder, to diff the launcher before and after
a change that must not alter what it writes.

    python3 tests/launch/render_snapshot.py /tmp/snapshot_before     # on the old code
    python3 tests/launch/render_snapshot.py /tmp/snapshot_after      # on the new code
    diff -r /tmp/snapshot_before /tmp/snapshot_after                  # empty, or every difference explained

A dry run in-process (NEMO_LAUNCHER_DEBUG=1, nothing written or submitted): each (stage, config, cluster_type)
gets a folder `<stage>/<config>/<cluster_type>/` holding every rendered script (named by its path under the
results dir) and `plan.txt` (the printed plan: ids, dependencies, time, array), or `refusal.txt` holding the
one-line error when the launcher refuses the combination. Paths are fixed (launcher_scripts_path=/opt/launcher,
data_dir=/data, base_results_dir=/results), so the output depends on the code alone.
"""

import os
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import open_dict
from omegaconf.errors import OmegaConfBaseException

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from nemo_launcher.launch.errors import LauncherError  # noqa: E402
from nemo_launcher.launch.pipeline import build_plan, format_plan, submit_plan  # noqa: E402
from nemo_launcher.launch.resolvers import register_resolvers  # noqa: E402
from nemo_launcher.launch.stages import STAGES  # noqa: E402

CLUSTER_TYPES = ("bcm", "bcp", "interactive")
FIXED = ["launcher_scripts_path=/opt/launcher", "data_dir=/data", "base_results_dir=/results", "check_inputs=false"]
RESULTS = "/results"


def configs(group: str):
    root = REPO / "conf" / group
    return sorted(str(path.relative_to(root).with_suffix("")) for path in root.rglob("*.yaml"))


def render_one(group: str, choice: str, cluster_type: str):
    """{file name: text} for one dry run: its scripts and plan, or its refusal."""
    overrides = [f"stages=[{group}]", f"{group}={choice}", f"cluster_type={cluster_type}", *FIXED]
    try:
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
        choices = dict(cfg.hydra.runtime.choices)
        with open_dict(cfg):
            del cfg["hydra"]
        plan = build_plan(cfg, choices)
        submitted = submit_plan(plan)
    except LauncherError as error:
        return {"refusal.txt": f"{type(error).__name__}: {error}\n"}
    except OmegaConfBaseException as error:
        return {"refusal.txt": f"{type(error).__name__}: {str(error).splitlines()[0]}\n"}
    files = {"plan.txt": format_plan(plan, submitted) + "\n"}
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            name = str(job.script_path).replace(RESULTS + "/", "").replace("/", "__")
            files[name] = job.script
    return files


def main(outdir: str) -> None:
    os.environ["NEMO_LAUNCHER_DEBUG"] = "1"
    register_resolvers()
    out = Path(outdir)
    count = 0
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for group in STAGES:
            for choice in configs(group):
                for cluster_type in CLUSTER_TYPES:
                    folder = out / group / choice.replace("/", "__") / cluster_type
                    folder.mkdir(parents=True, exist_ok=True)
                    for name, text in render_one(group, choice, cluster_type).items():
                        (folder / name).write_text(text)
                    count += 1
    print(f"{count} dry runs rendered into {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python3 {sys.argv[0]} OUTDIR")
    main(sys.argv[1])
