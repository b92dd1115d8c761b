"""How a training job spreads over its devices: the knobs the performance model (and the AutoConfigurator's
search) turns.

    layout = layout_of_stage(stage_section)                  # as the config says
    layout.replace(tp=4, mbs=1).data_parallel                 # a candidate

Keys and defaults as the training configs spell them (conf/_family/*_training.yaml): model.tensor_model_parallel_size,
pipeline_model_parallel_size, virtual_pipeline_model_parallel_size, context_parallel_size,
expert_model_parallel_size, micro_batch_size, global_batch_size, sequence_parallel,
activations_checkpoint_granularity/method/num_layers, optim.name, peft.peft_scheme; trainer.num_nodes, devices,
precision.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

RECOMPUTE_GRANULARITIES = (None, "selective", "full")


def _count(value, default: int = 1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else default


@dataclasses.dataclass(frozen=True)
class Layout:
    tp: int = 1  # tensor-parallel ranks
    pp: int = 1  # pipeline stages
    vp: int = 1  # model chunks per pipeline stage (interleaved schedule); 1 = not interleaved
    cp: int = 1  # context-parallel ranks (each holds 1/cp of a sequence)
    ep: int = 1  # expert-parallel ranks (MoE)
    mbs: int = 1  # micro-batch size, samples
    gbs: int = 1  # global batch size, samples per optimizer step
    sequence_parallel: bool = False
    recompute: str | None = None  # None, "selective" or "full"
    recompute_method: str = "uniform"  # "uniform" or "block" (full recomputation only)
    recompute_layers: int | None = None  # full: layers per checkpointed group (uniform) or per stage (block)
    distributed_optimizer: bool = True  # optimizer state, master weights and gradients sharded over data-parallel
    nodes: int = 1
    devices_per_node: int = 8
    precision: str = "bf16"
    fp8: bool = False
    overlap_grad_sync: bool = True  # gradient reduction overlaps the backward pass
    overlap_param_sync: bool = True  # distributed optimizer: parameter gathering overlaps the next forward
    tp_comm_overlap: bool = False  # Transformer Engine userbuffers hide TP communication behind GEMMs
    frozen_base: bool = False  # PEFT: the model's own weights get no gradient and no optimizer state

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def data_parallel(self) -> int:
        return max(self.devices // self.model_parallel, 1)

    @property
    def micro_batches(self) -> int:
        """Micro-batches each data-parallel rank runs per optimizer step (at least 1)."""
        return max(self.gbs // max(self.mbs * self.data_parallel, 1), 1)

    def replace(self, **changes) -> "Layout":
        return dataclasses.replace(self, **changes)


def layout_of_stage(stage: Mapping[str, Any]) -> Layout:
    """The layout a resolved training-like stage config asks for."""
    model = stage.get("model") or {}
    trainer = stage.get("trainer") or {}
    optim = model.get("optim") or {}
    granularity = model.get("activations_checkpoint_granularity")
    vp = model.get("virtual_pipeline_model_parallel_size")
    devices = trainer.get("devices")
    return Layout(
        tp=_count(model.get("tensor_model_parallel_size")),
        pp=_count(model.get("pipeline_model_parallel_size")),
        vp=_count(vp),
        cp=_count(model.get("context_parallel_size")),
        ep=_count(model.get("expert_model_parallel_size")),
        mbs=_count(model.get("micro_batch_size")),
        gbs=_count(model.get("global_batch_size"), _count(model.get("micro_batch_size"))),
        sequence_parallel=bool(model.get("sequence_parallel", False)),
        recompute=granularity if granularity in RECOMPUTE_GRANULARITIES else None,
        recompute_method=str(model.get("activations_checkpoint_method") or "uniform"),
        recompute_layers=model.get("activations_checkpoint_num_layers")
        if isinstance(model.get("activations_checkpoint_num_layers"), int)
        else None,
        # NeMo's distributed_fused_adam and megatron-core's distributed optimizer shard the optimizer state.
        distributed_optimizer="distributed" in str(optim.get("name") or ""),
        nodes=_count(trainer.get("num_nodes")),
        devices_per_node=_count(devices if isinstance(devices, int) else None),
        precision=str(trainer.get("precision", "bf16")),
        fp8=bool(model.get("fp8", False)),
        overlap_grad_sync=bool(optim.get("overlap_grad_sync", True)),
        overlap_param_sync=bool(optim.get("overlap_param_sync", True)),
        tp_comm_overlap=bool(model.get("ub_tp_comm_overlap", False)),
        frozen_base=str((model.get("peft") or {}).get("peft_scheme") or "none").lower() != "none",
    )
