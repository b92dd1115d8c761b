"""The LightningModule: one training batch = one optimizer step over all of a rank's microbatches, any family.

Lightning runs the loop (steps, validation schedule, hooks, checkpoint plumbing); megatron-core does
the numerics: `get_forward_backward_func()` runs the microbatches through the recipe's forward step
(1F1B across pipeline stages when PP > 1, interleaved with virtual stages), megatron DDP reduces
gradients, megatron's optimizer clips and steps. Optimization is manual because the pipeline schedule
runs backward itself.

The parts (model chunks, optimizer, datasets) are built by `parts.build_parts` before the Trainer
exists, so the same code serves the benchmark's plain loop; this class only adapts them to Lightning.
"""

import dataclasses
import logging
import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from .optim import parameters_gathered, set_hyperparameters
from .samplers import EvalBatchSampler, StepBatchSampler, make_loader

log = logging.getLogger(__name__)


@dataclasses.dataclass
class StepRecord:
    """What the last training step did, for the logging callback (no device sync is forced to fill it)."""

    step: int  # optimizer steps completed, this one included
    losses: dict[str, torch.Tensor] | None  # the recipe's losses, means over this rank's microbatches; None off
    # the last pipeline stage
    global_batch_size: int
    microbatches: int
    lr: float
    grad_norm: float | None


class _OptimizerForLightning:
    """What Lightning asks of an optimizer, answered by megatron-core's. Stepping through Lightning's
    wrapper is what advances `trainer.global_step` under manual optimization."""

    def __init__(self, megatron_optimizer):
        self.megatron = megatron_optimizer
        self.defaults: dict[str, Any] = {}
        self.result = None

    @property
    def param_groups(self):
        return self.megatron.param_groups

    @property
    def state(self):
        # Lightning moves optimizer state between devices through this; megatron places its own state.
        return {}

    def step(self, closure=None):
        if closure is not None:
            closure()
        self.result = self.megatron.step()
        return self.result

    def zero_grad(self, set_to_none: bool = True):
        self.megatron.zero_grad(set_to_none)

    def state_dict(self):
        return self.megatron.state_dict()

    def load_state_dict(self, state_dict):
        self.megatron.load_state_dict(state_dict)


class TrainingModule(pl.LightningModule):
    def __init__(self, parts):
        super().__init__()
        self.automatic_optimization = False
        self.parts = parts
        self.chunks = torch.nn.ModuleList(parts.ddp_chunks)
        self.last_step: StepRecord | None = None
        self.last_val_losses: dict[str, float] | None = None  # every loss the recipe reports
        self.last_test_losses: dict[str, float] | None = None
        # Scores a subclass computes at validation besides the losses (a tuning job's exact match), by name.
        self.last_val_metrics: dict[str, float] = {}
        self._val_losses: list[dict[str, torch.Tensor]] = []
        self._consumed: int | None = None

    @property
    def last_val_loss(self) -> float | None:
        return None if self.last_val_losses is None else self.last_val_losses[self.parts.loss_name]

    @property
    def consumed_samples(self) -> int:
        """Samples consumed by all data-parallel ranks together up to the last completed step."""
        return self._consumed

    # ---- data ----------------------------------------------------------------------------------------
    def train_dataloader(self):
        data, seed = self.parts.cfg.model.data, self.parts.cfg.model.seed
        return self.step_loader(data.num_workers, shuffle_seed=seed if data.dataloader_type == "cyclic" else None)

    def step_loader(self, num_workers: int, shuffle_seed: int | None = None, collate_fn=None):
        """The training loader: parts.train_dataset in the batches of parts.batches, from the step the trainer has
        reached (so a resumed run goes on where it stopped). shuffle_seed None reads the dataset in order (for a
        dataset that shuffles itself); collate_fn as in make_loader."""
        p = self.parts
        sampler = StepBatchSampler(
            len(p.train_dataset),
            p.batches,
            p.cfg.trainer.max_steps,
            start_step=lambda: self.trainer.global_step,
            dp_rank=p.dp_rank,
            shuffle_seed=shuffle_seed,
        )
        return make_loader(p.train_dataset, sampler, num_workers, p.on_gpu, p.cfg.model.seed, collate_fn)

    def val_dataloader(self):
        p = self.parts
        return self._eval_loader(p.valid_dataset, p.cfg.trainer.limit_val_batches)

    def _eval_loader(self, dataset, limit: int):
        p = self.parts
        if dataset is None or limit == 0:
            return []
        sampler = EvalBatchSampler(
            len(dataset), p.cfg.model.global_batch_size, p.cfg.model.micro_batch_size, p.dp_rank, p.dp_size, limit
        )
        return make_loader(dataset, sampler, p.cfg.model.data.num_workers, p.on_gpu, p.cfg.model.seed)

    # ---- training ------------------------------------------------------------------------------------
    def configure_optimizers(self):
        return _OptimizerForLightning(self.parts.optimizer)

    def on_train_start(self) -> None:
        self._consumed = self.parts.batches.consumed_samples(self.trainer.global_step)

    def training_step(self, batch, batch_idx):
        p = self.parts
        step = self.trainer.global_step
        batch_size = p.batches.batch_size(self._consumed)
        microbatches = p.recipe.split_microbatches(batch, p.cfg.model.micro_batch_size)
        for chunk in self.chunks:
            chunk.zero_grad_buffer()
        p.optimizer.zero_grad()
        losses = p.run_microbatches(microbatches, forward_only=False)
        lr = p.lr_schedule(step)
        set_hyperparameters(p.optimizer, lr, p.cfg.model.optim.weight_decay)
        optimizer = self.optimizers()
        optimizer.step()
        _, grad_norm, _ = optimizer.optimizer.result
        self._consumed += batch_size
        self.last_step = StepRecord(step + 1, losses, batch_size, len(microbatches), lr, grad_norm)

    # ---- evaluation ----------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val_losses = []
        self._gathered = parameters_gathered(self.parts.ddp_chunks)
        self._gathered.__enter__()

    def validation_step(self, batch, batch_idx):
        losses = self._evaluate_batch(batch)
        if losses is not None:
            self._val_losses.append(losses)

    def on_validation_epoch_end(self) -> None:
        self._gathered.__exit__(None, None, None)
        self.last_val_losses = self.parts.reduce_last_stage_means(_mean_of(self._val_losses))

    def evaluate_test_split(self) -> float | None:
        """Mean loss over `trainer.limit_test_batches` global batches of the test split (None if empty); every
        reported loss lands in last_test_losses."""
        if self.parts.test_dataset is None:  # tuning jobs have no test split (nor trainer.limit_test_batches)
            return None
        loader = self._eval_loader(self.parts.test_dataset, self.parts.cfg.trainer.limit_test_batches)
        if not loader:
            return None
        was_training = self.training
        self.eval()
        losses = []
        with torch.no_grad(), parameters_gathered(self.parts.ddp_chunks):
            for batch in loader:
                batch = {k: v.to(self.parts.device, non_blocking=True) for k, v in batch.items()}
                batch_losses = self._evaluate_batch(batch)
                if batch_losses is not None:
                    losses.append(batch_losses)
        self.train(was_training)
        self.last_test_losses = self.parts.reduce_last_stage_means(_mean_of(losses))
        return None if self.last_test_losses is None else self.last_test_losses[self.parts.loss_name]

    def write_outputs(self) -> dict[str, str]:
        """Called on every rank once the run has reached max_steps; what it wrote, {summary label: path}. Pre-training
        writes nothing beyond its checkpoints; a tuning job writes its tuned model here."""
        return {}

    def _evaluate_batch(self, batch) -> dict[str, torch.Tensor] | None:
        p = self.parts
        return p.run_microbatches(p.recipe.split_microbatches(batch, p.cfg.model.micro_batch_size), forward_only=True)

    # ---- checkpoint contents (the strategy does the I/O) ---------------------------------------------
    def sharded_model_state(self) -> dict[str, Any]:
        # One entry per chunk: dict keys repeat across chunks (local layer numbers), the ShardedTensor keys
        # inside are global, so a checkpoint loads into any TP/PP/VPP layout.
        return {f"model{i}": chunk.sharded_state_dict() for i, chunk in enumerate(self.parts.bare_chunks)}

    def sharded_optimizer_state(self, is_loading: bool) -> dict[str, Any]:
        return self.parts.optimizer.sharded_state_dict(self.sharded_model_state(), is_loading=is_loading)

    def load_model_state(self, state: dict[str, Any]) -> None:
        for i, chunk in enumerate(self.parts.bare_chunks):
            chunk.load_state_dict(state[f"model{i}"], strict=True)

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.parts.optimizer.load_state_dict(state)

    def sharded_extra_state(self) -> dict[str, Any]:
        """Saved beside weights and optimizer: the parallel layout (common) and this rank's RNG states."""
        state = {"parallel_layout": dict(self.parts.layout)}
        state.update(self._sharded_rng_state())
        return state

    def sharded_extra_state_to_load(self, saved_layout: dict | None) -> dict[str, Any]:
        """RNG states are per rank, so they are restored only into the layout that wrote them."""
        if saved_layout != self.parts.layout:
            log.warning(
                "checkpoint written with parallel layout %s, running with %s: weights and optimizer state "
                "are resharded, random-number states start fresh",
                saved_layout,
                self.parts.layout,
            )
            return {}
        return self._sharded_rng_state()

    def _sharded_rng_state(self) -> dict[str, Any]:
        from megatron.core.dist_checkpointing.mapping import ShardedObject

        layout, p = self.parts.layout, self.parts
        shape = (layout["pp"], layout["tp"], layout["dp"])
        offset = (p.pp_rank, p.tp_rank, p.dp_rank)
        if "cp" in layout:  # context-parallel ranks hold states of their own
            from megatron.core import parallel_state

            shape, offset = shape + (layout["cp"],), offset + (parallel_state.get_context_parallel_rank(),)
        return {"rng_state": ShardedObject("rng_state", _rng_snapshot(p.on_gpu), shape, offset, replica_id=0)}

    def restore_extra_state(self, loaded: dict[str, Any]) -> None:
        if "rng_state" in loaded:
            _rng_restore(loaded["rng_state"], self.parts.on_gpu)


def _mean_of(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor] | None:
    """Per loss name, the mean over evaluated batches (None when this rank evaluated none: not the last stage)."""
    if not batches:
        return None
    return {name: torch.stack([losses[name] for losses in batches]).mean() for name in batches[0]}


def _rng_snapshot(on_gpu: bool) -> dict[str, Any]:
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    snapshot = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "tracker": get_cuda_rng_tracker().get_states(),
    }
    if on_gpu:
        snapshot["cuda"] = torch.cuda.get_rng_state()
    return snapshot


def _rng_restore(snapshot: dict[str, Any], on_gpu: bool) -> None:
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    random.setstate(snapshot["python"])
    np.random.set_state(snapshot["numpy"])
    torch.set_rng_state(snapshot["torch"])
    get_cuda_rng_tracker().set_states(snapshot["tracker"])
    if on_gpu and "cuda" in snapshot:
        torch.cuda.set_rng_state(snapshot["cuda"])
