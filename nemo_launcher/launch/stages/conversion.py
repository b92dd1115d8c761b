"""Conversion stage: a training checkpoint -> `<train dir>/convert_nemo/results/<nemo_file_name>` (+ Hugging Face).

    python3 main.py stages=[training,conversion] training=gpt3/126m
    python3 main.py stages=[conversion] conversion.run.model_train_name=gpt3_5b conversion.model.tensor_model_parallel_size=2

One job of TP x PP processes (the layout of the .nemo), spread over run.nodes x run.ntasks_per_node; the
config derives those from cluster.gpus_per_node. Each process reads its slice of the checkpoint.
"""
from pathlib import Path
from typing import List

from ..errors import config_error
from ..families import family_for, program_for
from ..job_spec import Command, JobSpec
from .base import Stage, positive_int

HF_MODES = ("auto", "required", "off")
HF_DTYPES = ("float32", "bfloat16", "float16")


class ConversionStage(Stage):
    kind = "conversion"

    def job_specs(self) -> List[JobSpec]:
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        config = self.resolved()
        program = program_for(family_for(self.kind, self.choice), self.kind, self.choice)
        run = self.run_section(config)
        model, hf = config.get("model") or {}, config.get("hf") or {}
        tp = positive_int(self.key("model", "tensor_model_parallel_size"), model.get("tensor_model_parallel_size", 1))
        pp = positive_int(self.key("model", "pipeline_model_parallel_size"), model.get("pipeline_model_parallel_size", 1))
        mp = model.get("model_parallel_size")
        if mp is not None and mp != tp * pp:
            raise config_error(self.key("model", "model_parallel_size"), mp, f"must equal TP({tp}) x PP({pp}) = {tp * pp}")
        nodes = positive_int(self.key("run", "nodes"), run.get("nodes", 1))
        tasks = positive_int(self.key("run", "ntasks_per_node"), run.get("ntasks_per_node", 1))
        if (nodes * tasks) % (tp * pp):
            raise config_error(
                self.key("run", "ntasks_per_node"), tasks,
                f"nodes({nodes}) x ntasks_per_node({tasks}) = {nodes * tasks} processes cannot hold TP({tp}) x PP({pp}) = "
                f"{tp * pp} ranks evenly; make it a multiple",
            )
        for key in ("checkpoint_folder", "hparams_file"):
            value = model.get(key)
            if not value or not Path(str(value)).is_absolute():
                raise config_error(self.key("model", key), value, "must be an absolute path")
        if not run.get("nemo_file_name") or "/" in str(run["nemo_file_name"]):
            raise config_error(self.key("run", "nemo_file_name"), run.get("nemo_file_name"), "a file name such as megatron_gpt.nemo")
        if hf.get("mode", "auto") not in HF_MODES:
            raise config_error(self.key("hf", "mode"), hf.get("mode"), f"choose one of {', '.join(HF_MODES)}")
        if hf.get("dtype") is not None and hf["dtype"] not in HF_DTYPES:
            raise config_error(self.key("hf", "dtype"), hf["dtype"], f"choose one of {', '.join(HF_DTYPES)}, or null for as trained")
        command = Command(program, ("--config", str(self.config_file(run))))
        return self.one_job(config, run, [command], nodes=nodes, tasks_per_node=tasks)
