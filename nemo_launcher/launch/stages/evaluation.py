"""Evaluation stage: lm-eval on a converted `.nemo`, task data from local files.

    python3 main.py stages=[training,conversion,evaluation] training=gpt3/126m
    python3 main.py stages=[evaluation] evaluation=gpt3/evaluate_lambada evaluation.run.model_train_name=gpt3_5b

One job of TP processes (model.tensor_model_parallel_size), spread over run.nodes x run.ntasks_per_node.
"""
from pathlib import Path
from typing import List

from ..errors import config_error
from ..eval_tasks import parse_tasks
from ..families import family_for, program_for
from ..job_spec import Command, JobSpec
from .base import Stage, positive_int


SAMPLE_DATA_PROGRAM = "nemo_launcher.jobs.gpt.sample_eval_data"


class EvaluationStage(Stage):
    kind = "evaluation"

    def job_specs(self) -> List[JobSpec]:
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        config = self.resolved()
        program = program_for(family_for(self.kind, self.choice), self.kind, self.choice)
        run = self.run_section(config)
        model = config.get("model") or {}
        try:
            parse_tasks(run.get("tasks"))
        except ValueError as error:
            raise config_error(self.key("run", "tasks"), run.get("tasks"), str(error)) from None
        tp = positive_int(self.key("model", "tensor_model_parallel_size"), model.get("tensor_model_parallel_size", 1))
        if model.get("pipeline_model_parallel_size", 1) != 1:
            raise config_error(self.key("model", "pipeline_model_parallel_size"), model.get("pipeline_model_parallel_size"),
                               "evaluation runs without pipeline parallelism: set 1 (the .nemo is resharded on load)")
        mp = model.get("model_parallel_size")
        if mp is not None and mp != tp:
            raise config_error(self.key("model", "model_parallel_size"), mp, f"must equal TP({tp}) x PP(1) = {tp}")
        nodes = positive_int(self.key("run", "nodes"), run.get("nodes", 1))
        tasks = positive_int(self.key("run", "ntasks_per_node"), run.get("ntasks_per_node", 1))
        if (nodes * tasks) % tp:
            raise config_error(self.key("run", "ntasks_per_node"), tasks,
                               f"nodes({nodes}) x ntasks_per_node({tasks}) = {nodes * tasks} processes cannot hold TP({tp}) "
                               "ranks evenly; make it a multiple")
        positive_int(self.key("model", "eval_batch_size"), model.get("eval_batch_size", 4))
        for section, key, value in (("model", "nemo_model", model.get("nemo_model")), ("run", "task_data_dir", run.get("task_data_dir"))):
            if not value or not Path(str(value)).is_absolute():
                raise config_error(self.key(section, key), value, "must be an absolute path")
        commands = (Command(program, ("--config", str(self.config_file(run)))),)
        if run.get("prepare_sample_data"):
            # Smoke-test task files made from local text, for machines that cannot fetch the real task data.
            sample = Command(SAMPLE_DATA_PROGRAM, ("--task-data-dir", str(run["task_data_dir"])), distributed=False)
            commands = (sample,) + commands
        return self.one_job(config, run, commands, nodes=nodes, tasks_per_node=tasks)
