"""Base Command Platform backend (cluster_type=bcp): a bcprun script, run with bash inside the NGC job."""

import subprocess
from collections.abc import Sequence
from pathlib import Path

from ...contract.job_start_values import AtJobStart
from ..errors import StageFailed, config_error
from ..job_spec import Command, JobSpec, Wait
from ..secrets import export_lines
from ..shell import join, quote
from .base import Backend


class BcpBackend(Backend):
    name = "bcp"
    queues_jobs = False

    def log_pattern(self, spec: JobSpec, job_id: str | None) -> str:
        return f"{self.log_base(spec)}_<YYYYmmdd_HHMMSS>.out"

    def validate(self, specs_by_stage: Sequence[Sequence[JobSpec]]) -> None:
        stages = [specs[0].stage for specs in specs_by_stage if specs]
        if len(stages) > 1:
            raise config_error(
                "stages",
                stages,
                "Base Command Platform runs one stage per job: list exactly one stage, e.g. stages=[training], "
                "and submit the next stage as its own NGC job",
            )
        for specs in specs_by_stage:
            for spec in specs:
                if spec.groups:
                    raise config_error(
                        "cluster_type",
                        self.name,
                        f"the {spec.stage} job is heterogeneous ({', '.join(group.name for group in spec.groups)} on "
                        "nodes of their own), and Base Command Platform starts every replica of a job with the same "
                        "command: it cannot place groups with different programs and sizes. Run this stage on Slurm "
                        "(cluster_type=bcm) or on one machine (cluster_type=interactive)",
                    )
        super().validate(specs_by_stage)

    def bcprun_line(self, spec: JobSpec, command: Command) -> str:
        if spec.is_array:
            nodes, tasks = spec.array_nodes, spec.array_tasks_per_node
        else:
            nodes, tasks = (spec.nodes, spec.tasks_per_node) if command.distributed else (1, 1)
        pairs = dict(self.context.env)
        pairs.update(spec.env)
        pairs["PYTHONPATH"] = str(self.context.launcher_scripts_path)
        env_words = " ".join(f"--env {quote(f'{name}={value}')}" for name, value in pairs.items())
        program = f"python3 -u -m {quote(command.module)} {join(command.args)}".rstrip()
        words = [f"bcprun --nnodes {quote(nodes)} --npernode {quote(tasks)}"]
        if spec.is_array:
            # Array work is split across replicas by rank (RANK/WORLD_SIZE), launched with mpirun.
            words.append(f"--launcher {quote('mpirun --allow-run-as-root')}")
        words += [env_words, f"--cmd {quote(program)}"]
        return " ".join(word for word in words if word)

    def render(self, spec: JobSpec) -> str:
        lines = [
            "#!/bin/bash",
            f"# Written by nemo_launcher ({spec.stage} stage) for Base Command Platform: "
            "bash <this file> inside the NGC job.",
            "set -euo pipefail",
        ]
        # Read on the node when the job starts, so no secret lands in a script or a log.
        lines += export_lines(dict(self.context.secret_files), quote)
        if isinstance(spec.nodes, AtJobStart):
            variable = spec.nodes.variable
            lines += [
                f"# The node count is {variable}, which NGC sets in every replica to the job's replica count.",
                f': "${{{variable}:?is set by Base Command Platform in an NGC job: run this script inside one}}"',
            ]
        lines += ["", f'log_stem={quote(str(self.log_base(spec)))}_"$(date +%m%d_%H%M%S)"']
        for command in spec.commands:
            lines += ["", f'{self.bcprun_line(spec, command)} 2>&1 | tee -a "${{log_stem}}.out"']
        return "\n".join(lines) + "\n"

    def submit(self, script: Path, spec: JobSpec, waits: Sequence[Wait], tag: str | None = None) -> str | None:
        result = subprocess.run(["bash", str(script)], cwd=str(spec.directory))
        if result.returncode != 0:
            raise StageFailed(
                f"stage {spec.stage!r} (job {spec.name}) exited with status {result.returncode}", result.returncode
            )
        return None
