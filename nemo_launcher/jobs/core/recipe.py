"""What a model family gives the trainer core: one Recipe.

    GPT = Recipe(megatron_modules=("megatron.core.models.gpt",), transformer_config=transformer_config,
                 build_chunk=gpt_chunk, build_datasets=build_gpt_datasets, forward_step=gpt_forward_step,
                 flops_per_token=model_flops_per_token)
    run_program(argv, prog, TrainingConfig, lambda cfg: GPT)     # a family's train.py (core/program.py)

Everything else is the core's, the same for every family: processes and parallel groups, the optimizer and
megatron DDP, the step/LR/ramp-up schedule, the resumable samplers, the Lightning loop through megatron-core's
forward/backward function, checkpoints and their space checks, stop signals, max_time, self-requeue, the run
lock, TensorBoard/W&B, the progress line and the summary.

The family's schema must carry the sections every pretraining schema shares (run, trainer, exp_manager:
common_training) and, under `model`: micro_batch_size, global_batch_size, tensor_model_parallel_size,
pipeline_model_parallel_size, seed, use_cpu_initialization, transformer_engine, make_vocab_size_divisible_by,
tokenizer (load_tokenizer's keys), optim, and data (num_workers, dataloader_type, splits_string, data_prefix,
blend()). Optional: virtual_pipeline_model_parallel_size, rampup_batch_size, sequence_parallel.
"""

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class ChunkStage:
    """Where one model chunk sits in the pipeline: what megatron-core's model constructors are told."""

    vp_stage: int | None  # virtual pipeline stage of this chunk; None without the interleaved schedule
    pre_process: bool  # the chunk holds the input embedding (first pipeline stage)
    post_process: bool  # the chunk holds the output layer and computes the loss (last pipeline stage)


@dataclasses.dataclass(frozen=True)
class Sequences:
    """Tokens per sample, as megatron-core's schedules size the activations sent between pipeline stages."""

    encoder: int  # the (only) input sequence of GPT and BERT; T5's encoder input
    decoder: int | None = None  # T5's decoder sequence (the schedules' decoder_seq_length); None for one stack

    @property
    def tokens(self) -> int:
        """Tokens one sample puts through the model, what tokens/s counts: for T5, encoder plus decoder tokens."""
        return self.encoder + (self.decoder or 0)


def encoder_only(model) -> Sequences:
    return Sequences(model.encoder_seq_length)


def split_along_batch(batch: dict[str, Any], micro_batch_size: int) -> list[dict[str, Any]]:
    """Views (no copies) of a step's concatenated samples, one dict per microbatch; every entry of the batch
    (tensors, or lists from the default collate) is cut along its first dimension."""
    count = len(next(iter(batch.values()))) // micro_batch_size
    return [{k: v[i * micro_batch_size : (i + 1) * micro_batch_size] for k, v in batch.items()} for i in range(count)]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A model family's part of pretraining. `model` below is the schema's `model` section, `cfg` the whole one."""

    # megatron-core modules the model is built from (e.g. "megatron.core.models.T5"), imported before the CPU shim
    # patches what is loaded.
    megatron_modules: tuple[str, ...]
    # (model, precision "bf16"/"fp16"/"fp32", on_gpu, use_te) -> TransformerConfig; core/transformer.py's
    # shared_transformer_settings holds the keys every family sets alike. T5 builds its encoder's config inside
    # build_chunk from this one.
    transformer_config: Callable[[Any, str, bool, bool], Any]
    # (model, config, padded vocab size, use_te, stage) -> one bare megatron-core model chunk (no Float16Module,
    # no DDP); called once per virtual pipeline stage, with the parallel state initialised.
    build_chunk: Callable[[Any, Any, int, bool, ChunkStage], Any]
    # (cfg, tokenizer, [train, validation, test] samples, blend [weight, prefix, ...]) -> (train, validation, test)
    # map-style datasets (None for a split of weight 0). A sample is a dict of arrays; the default collate stacks them.
    build_datasets: Callable[[Any, Any, list[int], list], tuple[Any, Any, Any]]
    # megatron-core's forward_step_func: (data iterator over microbatch dicts, model chunk) -> (output, loss_func).
    # On the last stage loss_func(output) returns (loss, {name: loss.detach().clone(), ...}) with every loss_names
    # entry (clone: the schedule divides the returned loss in place).
    forward_step: Callable[[Any, Any], tuple[Any, Callable]]
    # What loss_func reports. The first is the loss that is minimised: `loss=` in progress lines, reduced_train_loss,
    # val_loss, test_loss. Any others (BERT: "lm loss", "sop loss") are logged beside it.
    loss_names: tuple[str, ...] = ("lm loss",)
    # model -> Sequences: the schedules' seq_length and decoder_seq_length, and tokens per sample for throughput.
    sequences: Callable[[Any], Sequences] = encoder_only
    # (a step's batch for this rank, micro_batch_size) -> the microbatch dicts forward_step will read, in order.
    split_microbatches: Callable[[dict[str, Any], int], list[dict[str, Any]]] = split_along_batch
    # (model, padded vocab size) -> model FLOPs per token (forward + backward), for MFU on GPUs; None: no MFU.
    flops_per_token: Callable[[Any, int], float] | None = None
    # (model, on_gpu, use_te) -> None, raising JobConfigError for settings the layer spec cannot run.
    check_support: Callable[[Any, bool, bool], None] | None = None
    # model -> extra keyword arguments of parallel_state.initialize_model_parallel (a T5 pipeline split, once
    # megatron-core takes one again: 0.16 has none, so the T5 schema keeps PP at 1).
    parallel_options: Callable[[Any], dict[str, Any]] | None = None
    # (cfg, TrainingOutcome) -> (key, value) lines added to the closing summary.
    summary_items: Callable[[Any, Any], Iterable[tuple[str, Any]]] | None = None
    # cfg -> a description of the data build_datasets reads instead of the blend of indexed datasets (BERT's LDDL
    # folders), for the summary; the core then resolves no blend and passes build_datasets an empty one. None: the
    # blend of model.data.data_prefix or run.preprocessed_dir.
    open_data: Callable[[Any], str] | None = None
    # cfg -> training samples in one pass over model.data.train, counted from the data set the job opens: what a
    # run sized in trainer.max_epochs derives its max_steps from (run_length.py). None: the family's schema sizes
    # runs in steps only.
    epoch_samples: Callable[[Any], int] | None = None

    def __post_init__(self):
        if not self.loss_names:
            raise ValueError("a recipe reports at least one loss")


def metric_name(loss_name: str) -> str:
    """`sop loss` -> `sop_loss`: how a reported loss is named in progress lines and TensorBoard tags."""
    return loss_name.replace(" ", "_")


def extra_loss_names(recipe: Recipe) -> Sequence[str]:
    return recipe.loss_names[1:]
