"""Data preparation stage: the chain of steps the dataset's schema lists (download -> extract -> preprocess, ...).

Every step is a job running `<the family's data package>.<step>` (launch/families.py), shaped as the schema's
StepPlan says: an array (one task per shard or node) or a single job, with its tasks per node, CPUs per task and
GPUs. On Slurm an array step after an array step waits per task (aftercorr: task i for task i) unless it reads
what every task wrote; any other step waits for the whole step before (afterok). Interactive runs do the steps
here in order, each over every item. All steps read the one resolved config of the stage, bound to the schema the
family's row names on both sides.
"""
from pathlib import Path
from typing import List, Optional

from ...contract.file_numbers import slurm_array
from ..job_spec import Command, JobSpec
from .base import Stage, dump_config, parse_dependency


class DataPreparationStage(Stage):
    kind = "data_preparation"

    def job_specs(self) -> List[JobSpec]:
        _, package, config, cfg = self.bind_family()
        run = cfg.run
        chain, dependency = parse_dependency(self.key("run", "dependency"), run.dependency)
        directory = Path(run.results_dir)
        config_file = self.config_file(run)
        specs: List[JobSpec] = []
        files = self.files_of(cfg)
        for plan in cfg.steps():
            is_array = plan.items is not None
            previous: Optional[JobSpec] = specs[-1] if specs else None
            specs.append(JobSpec(
                stage=self.kind,
                name=f"{run.name}_{plan.name}",
                directory=directory / plan.name,
                # Several tasks of one step each run the program (srun over all tasks, torchrun here); one task runs it once.
                commands=(Command(f"{package}.{plan.name}", ("--config", str(config_file)),
                                  distributed=plan.tasks_per_node > 1),),
                time_limit=str(run.time_limit),
                tasks_per_node=plan.tasks_per_node,
                uses_gpus=plan.uses_gpus,
                cpus_per_task=plan.cpus_per_task,
                array=slurm_array(plan.items, plan.array_limit) if is_array else None,
                array_nodes=plan.bcp_nodes,
                array_tasks_per_node=plan.bcp_tasks_per_node,
                # The first step waits for the previous stage; a shard's next step waits for that shard only.
                chain=chain if previous is None else (
                    "aftercorr" if previous.array and is_array and plan.per_task else "afterok"),
                dependency=dependency,
                files=((config_file, dump_config(config)),) if previous is None else (),
                reads=files["reads"] if previous is None else (),
                writes=files["writes"],
            ))
        return specs
