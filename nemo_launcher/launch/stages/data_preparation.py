"""Data preparation stage: a chain of steps (download -> extract -> preprocess, or train_tokenizer -> preprocess).

On Slurm each per-shard step is an array job over `file_numbers`, and task i of a step waits only for task i of
the step before (aftercorr). Interactive runs do the steps here in order, each over every shard. The steps'
job programs are nemo_launcher.jobs.data.<step>; they all read the one resolved config of the stage.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import config_error
from ..file_numbers import FileNumbersError, parse_file_numbers, slurm_array
from ..job_spec import Command, JobSpec
from .base import Stage, dump_config, parse_dependency, positive_int

PROGRAMS = "nemo_launcher.jobs.data"


class DataPreparationStage(Stage):
    kind = "data_preparation"

    def steps(self, config: Dict[str, Any]) -> List[Tuple[str, bool]]:
        """(step, is an array over the shards) in order, as the config's switches select them."""
        dataset = config.get("dataset")
        if dataset == "custom_dataset":
            steps = [("train_tokenizer", False)] if config.get("train_tokenizer") else []
            if config.get("preprocess_data", True):
                steps.append(("preprocess", True))
        elif dataset == "pile":
            steps = [("download", True), ("extract", True)] if config.get("download_the_pile", True) else []
            if config.get("preprocess_data", True):
                steps.append(("preprocess", True))
        else:
            raise config_error(self.key("dataset"), dataset, "use pile (download_gpt3_pile, tiny_pile) or custom_dataset")
        if not steps:
            raise config_error(self.key("preprocess_data"), config.get("preprocess_data"),
                               "every step is switched off; enable download_the_pile, train_tokenizer or preprocess_data")
        return steps

    def array_items(self, config: Dict[str, Any], run: Dict[str, Any]) -> List[int]:
        if config.get("dataset") == "custom_dataset":
            files = [f for f in config.get("raw_dataset_files") or [] if f is not None]
            if config.get("preprocess_data", True) and not files:
                raise config_error(self.key("raw_dataset_files"), config.get("raw_dataset_files"),
                                   "list the json/jsonl/json.gz files to preprocess")
            nodes = positive_int(self.key("run", "node_array_size"), run.get("node_array_size"))
            return list(range(nodes))
        try:
            return parse_file_numbers(config.get("file_numbers"), key=self.key("file_numbers"))
        except FileNumbersError as error:
            raise config_error(self.key("file_numbers"), config.get("file_numbers"), str(error).split(": ", 1)[-1]) from None

    def job_specs(self) -> List[JobSpec]:
        config = self.resolved()
        run = self.run_section(config)
        chain, dependency = parse_dependency(self.key("run", "dependency"), run.get("dependency"))
        items = self.array_items(config, run)
        node_array_size = positive_int(self.key("run", "node_array_size"), run.get("node_array_size", len(items)))
        cpus = run.get("cpus_per_node")
        if cpus is not None:
            positive_int(self.key("run", "cpus_per_node"), cpus)
        bcp_per_node = positive_int(self.key("run", "bcp_preproc_npernode"), run.get("bcp_preproc_npernode", 1))
        directory = Path(run["results_dir"])
        config_file = directory / f"{run['name']}_hydra.yaml"
        specs: List[JobSpec] = []
        for step, is_array in self.steps(config):
            previous: Optional[JobSpec] = specs[-1] if specs else None
            specs.append(JobSpec(
                stage=self.kind,
                name=f"{run['name']}_{step}",
                directory=directory / step,
                commands=(Command(f"{PROGRAMS}.{step}", ("--config", str(config_file)), distributed=False),),
                time_limit=str(run["time_limit"]),
                uses_gpus=False,
                cpus_per_task=cpus,
                array=slurm_array(items, node_array_size) if is_array else None,
                array_nodes=min(node_array_size, len(items)) if is_array else 1,
                array_tasks_per_node=bcp_per_node if step == "preprocess" else 1,
                # The first step waits for the previous stage; a shard's next step waits for that shard only.
                chain=chain if previous is None else ("aftercorr" if previous.array and is_array else "afterok"),
                dependency=dependency,
                files=((config_file, dump_config(config)),) if previous is None else (),
            ))
        return specs
