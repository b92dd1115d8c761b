"""Fine-tuning stage: supervised fine-tuning (SFT) of a converted `.nemo` on prompt/answer jsonl files.

    python3 main.py stages=[fine_tuning] fine_tuning=gpt3/squad fine_tuning.run.model_train_name=gpt3_126m

One job of trainer.num_nodes x trainer.devices processes. When the config has a `squad_preparation`
section, a single-task command first turns the SQuAD v1.1 JSON files into the jsonl the trainer reads
(it skips files that are already there), so the data is ready before any GPU process starts.
"""
from typing import Any, Dict, List

from ..errors import config_error
from ..families import family_for, program_for
from ..job_spec import Command, JobSpec
from .base import Stage, check_global_batch, positive_int, tensor_parallel_env

# SQuAD JSON -> prompt/answer jsonl. Standard library only, and the same for every decoder family.
SQUAD_PROGRAM = "nemo_launcher.jobs.data.squad"


def data_parallel_size(key, model: Dict[str, Any], nodes: int, devices: int) -> int:
    """Checks the process layout against the batch sizes, showing every factor; returns DP.

    The architecture (heads, layers) lives in the `.nemo` file, which the launcher does not open,
    so only the layout checks that need no architecture are made here; the job checks the rest.
    """
    tp = positive_int(key("tensor_model_parallel_size"), model.get("tensor_model_parallel_size", 1))
    pp = positive_int(key("pipeline_model_parallel_size"), model.get("pipeline_model_parallel_size", 1))
    if pp != 1:
        raise config_error(
            key("pipeline_model_parallel_size"), pp,
            "fine-tuning runs without pipeline parallelism: set 1 and use tensor parallelism "
            "(tensor_model_parallel_size) to split a large model",
        )
    world = nodes * devices
    if world % tp:
        raise config_error(
            key("tensor_model_parallel_size"), tp,
            f"TP({tp}) x PP({pp}) = {tp * pp} does not divide nodes({nodes}) x devices({devices}) = {world}",
        )
    dp = world // tp
    check_global_batch(key, model, nodes, devices, tp, pp)
    return dp


def check_datasets(key, data: Dict[str, Any]) -> None:
    """File lists and sampling weights, the mistakes that would otherwise surface after the queue wait."""
    for split in ("train_ds", "validation_ds"):
        section = data.get(split)
        if not isinstance(section, dict):
            raise config_error(key("data", split), section, "must be a section with file_names (a list of jsonl files)")
        files = section.get("file_names")
        if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
            raise config_error(key("data", split, "file_names"), files, "list one or more jsonl files, e.g. [/data/train.jsonl]")
    train = data["train_ds"]
    weights = train.get("concat_sampling_probabilities")
    files = train["file_names"]
    if weights is not None or len(files) > 1:
        if not isinstance(weights, list) or len(weights) != len(files):
            raise config_error(
                key("data", "train_ds", "concat_sampling_probabilities"), weights,
                f"give one probability per training file ({len(files)} files)",
            )
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
            raise config_error(
                key("data", "train_ds", "concat_sampling_probabilities"), weights, "probabilities must be >= 0 and sum to 1",
            )
    template = train.get("prompt_template", "{input} {output}")
    if not isinstance(template, str) or not template.rstrip().endswith("{output}") or "{input}" not in template:
        raise config_error(
            key("data", "train_ds", "prompt_template"), template,
            "must contain {input} and end with {output}, e.g. \"{input} {output}\" or \"Q: {input}\\nA: {output}\"",
        )


class FineTuningStage(Stage):
    kind = "fine_tuning"

    def check_method(self, config: Dict[str, Any]) -> None:
        """Hook for stages that train something other than all weights (peft)."""

    def job_specs(self) -> List[JobSpec]:
        config = self.resolved()
        program = program_for(family_for(self.kind, self.choice), self.kind, self.choice)
        run = self.run_section(config)
        trainer, model = config.get("trainer") or {}, config.get("model") or {}
        nodes = positive_int(self.key("trainer", "num_nodes"), trainer.get("num_nodes"))
        devices = positive_int(self.key("trainer", "devices"), trainer.get("devices"))
        key = lambda *parts: self.key("model", *parts)  # noqa: E731
        if not model.get("restore_from_path"):
            raise config_error(key("restore_from_path"), model.get("restore_from_path"),
                               "name the .nemo to fine-tune (the conversion stage writes <train dir>/convert_nemo/results/megatron_gpt.nemo)")
        data_parallel_size(key, model, nodes, devices)
        check_datasets(key, model.get("data") or {})
        self.check_method(config)
        config_file = str(self.config_file(run))
        commands = []
        if config.get("squad_preparation"):
            commands.append(Command(SQUAD_PROGRAM, ("--config", config_file), distributed=False))
        commands.append(Command(program, ("--config", config_file)))
        return self.one_job(config, run, commands, nodes=nodes, tasks_per_node=devices, env=tensor_parallel_env(model))
