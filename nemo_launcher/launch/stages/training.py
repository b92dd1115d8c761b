"""Training stage: one job running the family's trainer on nodes x devices processes."""
from pathlib import Path
from typing import Any, Dict, List

from ...contract import RESUME_MARKER
from ..errors import config_error
from ..families import family_for, program_for
from ..job_spec import Command, JobSpec
from .base import Stage, check_global_batch, positive_int, tensor_parallel_env


def check_parallelism(model: Dict[str, Any], nodes: int, devices: int, prefix: str = "training") -> None:
    """The layout checks Megatron would make hours later in the queue, made before submitting.

    Every message shows each factor, e.g. `TP(2) x PP(4) = 8 does not divide nodes(1) x devices(4) = 4`.
    """
    key = lambda name: f"{prefix}.model.{name}"  # noqa: E731
    tp = positive_int(key("tensor_model_parallel_size"), model.get("tensor_model_parallel_size", 1))
    pp = positive_int(key("pipeline_model_parallel_size"), model.get("pipeline_model_parallel_size", 1))
    world = nodes * devices
    if world % (tp * pp):
        raise config_error(
            key("tensor_model_parallel_size"), tp,
            f"TP({tp}) x PP({pp}) = {tp * pp} does not divide nodes({nodes}) x devices({devices}) = {world}; "
            "change the parallel sizes or trainer.num_nodes/trainer.devices",
        )
    dp = world // (tp * pp)
    heads = positive_int(key("num_attention_heads"), model.get("num_attention_heads"))
    if heads % tp:
        raise config_error(key("num_attention_heads"), heads, f"must be divisible by TP({tp}); pick a TP that divides {heads}")
    groups = model.get("num_query_groups")
    if groups is not None and (positive_int(key("num_query_groups"), groups) % tp or heads % groups):
        raise config_error(key("num_query_groups"), groups, f"must divide num_attention_heads({heads}) and be divisible by TP({tp})")
    layers = positive_int(key("num_layers"), model.get("num_layers"))
    vpp = model.get("virtual_pipeline_model_parallel_size") or 1
    positive_int(key("virtual_pipeline_model_parallel_size"), vpp)
    if layers % (pp * vpp):
        raise config_error(
            key("num_layers"), layers,
            f"must be divisible by PP({pp}) x virtual PP({vpp}) = {pp * vpp}; change num_layers or the pipeline sizes",
        )
    mbs, gbs = check_global_batch(key, model, nodes, devices, tp, pp)
    rampup = model.get("rampup_batch_size")
    if rampup is not None:
        if not (isinstance(rampup, list) and len(rampup) == 3 and all(isinstance(v, int) and v > 0 for v in rampup)):
            raise config_error(key("rampup_batch_size"), rampup, "use [start, increment, ramp-up samples], e.g. [256, 128, 50000000]")
        start, increment, _ = rampup
        if start % (mbs * dp) or increment % (mbs * dp) or start > gbs or (gbs - start) % increment:
            raise config_error(
                key("rampup_batch_size"), rampup,
                f"start and increment must be multiples of micro_batch_size x data-parallel size = {mbs * dp}, "
                f"and global_batch_size({gbs}) must be start + k x increment",
            )


class TrainingStage(Stage):
    kind = "training"

    def job_specs(self) -> List[JobSpec]:
        config = self.resolved()
        family = family_for(self.kind, self.choice)
        program = program_for(family, self.kind, self.choice)
        run = self.run_section(config)
        trainer, model = config.get("trainer") or {}, config.get("model") or {}
        nodes = positive_int(self.key("trainer", "num_nodes"), run.get("nodes") or trainer.get("num_nodes"))
        devices = positive_int(self.key("trainer", "devices"), run.get("ntasks_per_node") or trainer.get("devices"))
        check_parallelism(model, nodes, devices)
        if trainer.get("accumulate_grad_batches", 1) != 1:
            raise config_error(
                self.key("trainer", "accumulate_grad_batches"), trainer["accumulate_grad_batches"],
                "must be 1: gradient accumulation follows from model.global_batch_size / micro_batch_size",
            )
        command = Command(program, ("--config", str(self.config_file(run))))
        log_dir = (config.get("exp_manager") or {}).get("explicit_log_dir")
        marker = Path(str(log_dir)) / RESUME_MARKER if run.get("auto_requeue") and log_dir else None
        return self.one_job(config, run, [command], nodes=nodes, tasks_per_node=devices, env=tensor_parallel_env(model),
                            checkpoint_signal=True, requeue_marker=marker)
