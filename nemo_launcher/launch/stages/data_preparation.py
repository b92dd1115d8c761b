"""Data preparation stage: a chain of steps (download -> extract -> preprocess, or train_tokenizer -> preprocess).

On Slurm each per-shard step is an array job over `file_numbers`, and task i of a step waits only for task i of
the step before (aftercorr). Interactive runs do the steps here in order, each over every shard. The steps'
job programs are nemo_launcher.jobs.data.<step>; they all read the one resolved config of the stage, bound to
`nemo_launcher.contract.schemas.data_preparation` on both sides.
"""
from pathlib import Path
from typing import List, Optional

from ...contract.file_numbers import slurm_array
from ...contract.schemas.data_preparation import PileConfig
from ..job_spec import Command, JobSpec
from .base import Stage, dump_config, parse_dependency

PROGRAMS = "nemo_launcher.jobs.data"
SCHEMA = "nemo_launcher.contract.schemas.data_preparation:DataPreparation"
# Steps that run once per shard (pile) or per preprocessing node (custom datasets), as array jobs.
ARRAY_STEPS = ("download", "extract", "preprocess")


class DataPreparationStage(Stage):
    kind = "data_preparation"

    def job_specs(self) -> List[JobSpec]:
        config, cfg = self.bind(SCHEMA)
        run = cfg.run
        chain, dependency = parse_dependency(self.key("run", "dependency"), run.dependency)
        items = cfg.shard_numbers(self.kind) if isinstance(cfg, PileConfig) else list(range(run.node_array_size))
        directory = Path(run.results_dir)
        config_file = self.config_file(run)
        specs: List[JobSpec] = []
        files = self.files_of(cfg)
        for step in cfg.steps():
            is_array = step in ARRAY_STEPS
            previous: Optional[JobSpec] = specs[-1] if specs else None
            specs.append(JobSpec(
                stage=self.kind,
                name=f"{run.name}_{step}",
                directory=directory / step,
                commands=(Command(f"{PROGRAMS}.{step}", ("--config", str(config_file)), distributed=False),),
                time_limit=str(run.time_limit),
                uses_gpus=False,
                cpus_per_task=run.cpus_per_node,
                array=slurm_array(items, run.node_array_size) if is_array else None,
                array_nodes=min(run.node_array_size, len(items)) if is_array else 1,
                array_tasks_per_node=run.bcp_preproc_npernode if step == "preprocess" else 1,
                # The first step waits for the previous stage; a shard's next step waits for that shard only.
                chain=chain if previous is None else ("aftercorr" if previous.array and is_array else "afterok"),
                dependency=dependency,
                files=((config_file, dump_config(config)),) if previous is None else (),
                reads=files["reads"] if previous is None else (),
                writes=files["writes"],
            ))
        return specs
