"""Everything a training run is made of, built from the config and a family's recipe with megatron-core alone
(no Lightning).

    on_gpu = init_processes(recipe, cfg, placement)              # process group, CPU shim, TP/PP/DP groups, seeds
    parts = build_parts(recipe, cfg, placement, on_gpu, resume)  # model chunks, optimizer, schedules, datasets

program.py hands the parts to Lightning; benchmarks/trainer_overhead.py drives the same parts with a plain
loop, so the two differ only in the loop around them.
"""

import dataclasses
import importlib
import logging
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..common.config import JobConfigError
from ..common.distributed import Placement, init_process_group
from ..common.tokenizer import load_tokenizer
from .recipe import Recipe, Sequences
from .schedule import BatchSchedule, CosineSchedule
from .starting_weights import load_starting_weights
from .steps import run_microbatches
from .transformer import build_chunks, padded_vocab_size, transformer_engine_available, virtual_stages

log = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainingParts:
    recipe: Recipe
    cfg: Any  # the family's training schema, with sequence parallelism dropped where it cannot run
    placement: Placement
    on_gpu: bool
    device: torch.device
    use_te: bool
    layout: dict[str, int]  # {"tp", "pp", "vpp", "dp"}: sizes, saved with checkpoints
    tp_rank: int
    pp_rank: int
    dp_rank: int
    dp_size: int
    tokenizer: Any
    vocab_size: int  # padded
    transformer_config: Any
    sequences: Sequences  # tokens per sample: the schedules' sequence lengths, throughput
    bare_chunks: list[torch.nn.Module]  # the family's model, one per virtual stage, for state dicts
    ddp_chunks: list[torch.nn.Module]  # the same, inside Float16Module and megatron DDP, for compute
    optimizer: Any  # megatron-core MegatronOptimizer
    batches: BatchSchedule
    lr_schedule: Callable[[int], float]
    blend: list
    train_dataset: Any
    valid_dataset: Any
    test_dataset: Any
    data_description: str | None = None  # what the data is, when it is no blend of indexed datasets (tuning)

    def describe_data(self) -> str:
        from .datasets import dataset_description

        return self.data_description or dataset_description(self.blend)

    @property
    def loss_name(self) -> str:
        """The loss that is minimised (the recipe's first)."""
        return self.recipe.loss_names[0]

    def run_microbatches(self, microbatches: list[dict], forward_only: bool) -> dict[str, torch.Tensor] | None:
        """One step's forward (and backward) over the compute chunks: {loss name: mean} on the last stage, else None."""
        return run_microbatches(
            self.ddp_chunks,
            microbatches,
            self.recipe.forward_step,
            self.sequences,
            self.cfg.model.micro_batch_size,
            forward_only,
            self.recipe.loss_names,
        )

    def reduce_last_stage_means(self, local: dict[str, torch.Tensor] | None) -> dict[str, float] | None:
        """Means of per-rank values that only the last pipeline stage has (the recipe's losses), over data-parallel
        ranks, known to every rank. A collective: every rank must call it at the same point."""
        names = self.recipe.loss_names
        contributes = local is not None and self.tp_rank == 0
        values = [
            local[name].detach().float().reshape(()).to(self.device)
            if contributes
            else torch.zeros((), device=self.device)
            for name in names
        ]
        vector = torch.stack(values + [torch.tensor(float(contributes), device=self.device)])
        if self.placement.world_size > 1:
            torch.distributed.all_reduce(vector)
        *totals, count = vector.tolist()
        return {name: total / count for name, total in zip(names, totals)} if count else None


def init_processes(recipe: Recipe, cfg, placement: Placement) -> bool:
    """Joins the job's process group and megatron's parallel groups; returns on_gpu."""
    on_gpu = cfg.trainer.accelerator == "gpu"
    if on_gpu:
        if not torch.cuda.is_available():
            raise JobConfigError("trainer.accelerator: gpu, but CUDA is not available on this machine; use cpu")
        visible = torch.cuda.device_count()
        if placement.local_rank >= visible:
            raise JobConfigError(
                f"trainer.devices: local rank {placement.local_rank} has no GPU of its own ({visible} "
                "visible); every process of a node must see all of the node's GPUs"
            )
        torch.cuda.set_device(placement.local_rank)
    init_process_group(placement, "nccl" if on_gpu else "gloo")
    cfg.data_parallel_size(placement.world_size)  # checks the layout against the processes started

    # Every megatron module the run touches is imported before the CPU shim patches them (it patches
    # what is loaded), and before the parallel groups exist.
    import megatron.core.dist_checkpointing  # noqa: F401
    import megatron.core.dist_checkpointing.strategies.fully_parallel  # noqa: F401
    import megatron.core.dist_checkpointing.strategies.torch  # noqa: F401
    import megatron.core.distributed  # noqa: F401
    import megatron.core.optimizer  # noqa: F401
    import megatron.core.pipeline_parallel  # noqa: F401
    from megatron.core import parallel_state

    for name in recipe.megatron_modules:
        importlib.import_module(name)

    if not on_gpu:
        from ..common.mcore_cpu import apply_cpu_shim

        apply_cpu_shim()
    m = cfg.model
    parallel_state.initialize_model_parallel(
        **parallel_sizes(m, on_gpu), **(recipe.parallel_options(m) if recipe.parallel_options else {})
    )
    _seed(m.seed, parallel_state.get_pipeline_model_parallel_rank())
    return on_gpu


def parallel_sizes(model, on_gpu: bool) -> dict[str, Any]:
    """initialize_model_parallel's layout arguments from the model section (context parallelism and SHARP where
    the schema has them)."""
    return dict(
        tensor_model_parallel_size=model.tensor_model_parallel_size,
        pipeline_model_parallel_size=model.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_stages(model),
        context_parallel_size=getattr(model, "context_parallel_size", 1),
        expert_model_parallel_size=getattr(model, "expert_model_parallel_size", 1),
        # SHARP runs the data-parallel reductions in the switches: an NCCL (GPU) feature the schema refuses on a CPU.
        use_sharp=on_gpu and getattr(model, "sharp", False),
    )


def _seed(seed: int, pp_rank: int) -> None:
    """As Megatron-LM: pipeline stages draw different streams; data-parallel replicas the same one, so
    they initialise identical weights without a broadcast."""
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    stage_seed = seed + 100 * pp_rank
    random.seed(stage_seed)
    np.random.seed(stage_seed)
    torch.manual_seed(stage_seed)
    model_parallel_cuda_manual_seed(stage_seed)


def effective_model(model, use_te: bool):
    """Drops sequence parallelism where it cannot run, with a warning (it changes speed, not results)."""
    if getattr(model, "sequence_parallel", False) and (model.tensor_model_parallel_size == 1 or not use_te):
        why = "TP is 1" if model.tensor_model_parallel_size == 1 else "it needs Transformer Engine norms (local spec)"
        log.warning("model.sequence_parallel: disabled because %s", why)
        return dataclasses.replace(model, sequence_parallel=False)
    return model


_EMBEDDING_KEY = "embedding.word_embeddings.weight"


def resumed_vocab_size(checkpoint, computed: int, real_vocab: int, tensor_parallel: int) -> int:
    """The padded vocabulary a checkpoint was trained with, when resuming it under another TP size.

    Padding is a multiple of make_vocab_size_divisible_by x TP, so a TP=2 run pads further than TP=1
    would; the checkpoint's own row count is kept, if this TP can split it, so the weights load as they are.
    """
    from megatron.core import dist_checkpointing

    if checkpoint is None:
        return computed
    metadata = dist_checkpointing.load_tensors_metadata(str(checkpoint))
    if _EMBEDDING_KEY not in metadata:
        return computed
    rows = int(metadata[_EMBEDDING_KEY].global_shape[0])
    if rows == computed:
        return computed
    if rows < real_vocab or rows % tensor_parallel:
        raise JobConfigError(
            f"model.tensor_model_parallel_size: {checkpoint} has a {rows}-row embedding, which "
            f"TP({tensor_parallel}) cannot split; resume with a TP that divides {rows}"
        )
    log.info(
        "keeping the checkpoint's padded vocabulary of %d rows (this layout alone would pad to %d)", rows, computed
    )
    return rows


def build_parts(recipe: Recipe, cfg, placement: Placement, on_gpu: bool, resume=None) -> TrainingParts:
    """Pre-training's parts: the family's chunks with fresh weights (or a checkpoint's, loaded later by the
    strategy) over the blend of indexed datasets."""
    from .datasets import check_splits, dataset_sizes, resolve_blend

    use_te = False
    if cfg.model.transformer_engine:
        if not on_gpu:
            log.info("model.transformer_engine: the local layer spec is used on the CPU")
        elif transformer_engine_available():
            use_te = True
        else:
            log.warning(
                "model.transformer_engine: true, but Transformer Engine is not importable; using the local layer spec"
            )
    model = effective_model(cfg.model, use_te)
    cfg = dataclasses.replace(cfg, model=model)
    if recipe.check_support is not None:
        recipe.check_support(model, on_gpu, use_te)
    precision = cfg.trainer.precision_name()
    tokenizer = load_tokenizer(**dataclasses.asdict(model.tokenizer))
    vocab_size = padded_vocab_size(
        tokenizer.vocab_size, model.make_vocab_size_divisible_by, model.tensor_model_parallel_size
    )
    # Continued pretraining: a run without a checkpoint of its own starts from another's weights (its row count too).
    start = getattr(model, "restore_from_path", None) if resume is None else None
    vocab_size = resumed_vocab_size(resume or start, vocab_size, tokenizer.vocab_size, model.tensor_model_parallel_size)
    config = recipe.transformer_config(model, precision, on_gpu, use_te)
    prepare_layers(model, config, use_te)
    chunks = build_chunks(recipe.build_chunk, model, config, vocab_size, use_te)
    if start:
        load_starting_weights(chunks, start)
    description = None if recipe.open_data is None else recipe.open_data(cfg)
    blend = resolve_blend(cfg) if description is None else []
    if description is None:
        check_splits(blend, model.data.splits_string)

    def datasets(batches: BatchSchedule):
        train, valid, test = recipe.build_datasets(cfg, tokenizer, dataset_sizes(cfg, batches), blend)
        if train is None or len(train) == 0:
            raise JobConfigError(f"model.data.splits_string: {model.data.splits_string!r} leaves no training data")
        return train, valid, test

    return assemble_parts(
        recipe,
        cfg,
        placement,
        on_gpu,
        use_te,
        tokenizer,
        vocab_size,
        config,
        chunks,
        datasets,
        blend=blend,
        data_description=description,
    )


def prepare_layers(model, config, use_te: bool) -> None:
    """What has to be in place before the layers are built: megatron-core's log level, the environment switch
    Transformer Engine's attention reads query-key layer scaling from, and TE's userbuffers for TP overlap."""
    import os

    from .transformer import initialize_userbuffers, userbuffer_settings

    level = getattr(model, "apex_transformer_log_level", None)
    if level is not None:
        logging.getLogger("megatron.core").setLevel(level)
    if use_te:
        os.environ["NVTE_APPLY_QK_LAYER_SCALING"] = "1" if config.apply_query_key_layer_scaling else "0"
    if config.tp_comm_overlap:
        initialize_userbuffers(userbuffer_settings(model, config))


def assemble_parts(
    recipe: Recipe,
    cfg,
    placement: Placement,
    on_gpu: bool,
    use_te: bool,
    tokenizer,
    vocab_size: int,
    config,
    chunks: list[torch.nn.Module],
    datasets: Callable[[BatchSchedule], tuple[Any, Any, Any]],
    blend: list | None = None,
    data_description: str | None = None,
) -> TrainingParts:
    """The parts around a family's model chunks, whatever built them (random weights for pre-training, a .nemo's
    for tuning): megatron DDP, the optimizer, the batch and learning-rate schedules, and the datasets that
    `datasets(batch schedule)` returns as (train, validation, test)."""
    from megatron.core import parallel_state

    from .optim import attach_schedule_hooks, build_optimizer, ddp_config, use_distributed_optimizer, wrap_chunks

    model = cfg.model
    precision = cfg.trainer.precision_name()
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    for chunk in chunks:
        chunk.to(device)  # use_cpu_initialization builds on the host
    dp_size = parallel_state.get_data_parallel_world_size()
    distributed = use_distributed_optimizer(cfg, on_gpu)
    # Gradients are reduced over the data- and context-parallel ranks together.
    reducing = parallel_state.get_data_parallel_world_size(with_context_parallel=True)
    ddp_chunks = wrap_chunks(chunks, config, precision, ddp_config(cfg, precision, reducing, on_gpu, distributed))
    optimizer = build_optimizer(cfg, ddp_chunks, precision, distributed)
    attach_schedule_hooks(config, ddp_chunks, optimizer)

    batches = BatchSchedule(
        model.global_batch_size, model.micro_batch_size, dp_size, getattr(model, "rampup_batch_size", None)
    )
    sched = model.optim.sched
    lr_schedule = CosineSchedule(
        model.optim.lr, sched.min_lr, sched.warmup_steps, sched.constant_steps, cfg.trainer.max_steps
    )
    train, valid, test = datasets(batches)
    return TrainingParts(
        recipe=recipe,
        cfg=cfg,
        placement=placement,
        on_gpu=on_gpu,
        device=device,
        use_te=use_te,
        layout=_layout(model, config, dp_size),
        tp_rank=parallel_state.get_tensor_model_parallel_rank(),
        pp_rank=parallel_state.get_pipeline_model_parallel_rank(),
        dp_rank=parallel_state.get_data_parallel_rank(),
        dp_size=dp_size,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        transformer_config=config,
        sequences=recipe.sequences(model),
        bare_chunks=chunks,
        ddp_chunks=ddp_chunks,
        optimizer=optimizer,
        batches=batches,
        lr_schedule=lr_schedule,
        blend=blend or [],
        train_dataset=train,
        valid_dataset=valid,
        test_dataset=test,
        data_description=data_description,
    )


def _layout(model, config, dp_size: int) -> dict[str, int]:
    layout = {
        "tp": model.tensor_model_parallel_size,
        "pp": model.pipeline_model_parallel_size,
        "vpp": config.virtual_pipeline_model_parallel_size or 1,
        "dp": dp_size,
    }
    cp = getattr(model, "context_parallel_size", 1)
    if cp > 1:  # (a layout without CP keeps the keys its checkpoints were saved with)
        layout["cp"] = cp
    return layout


def shutdown() -> None:
    """Leaves megatron's groups and the process group (no-op for whatever was never joined)."""
    import sys

    if "megatron.core.parallel_state" in sys.modules:
        sys.modules["megatron.core.parallel_state"].destroy_model_parallel()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
