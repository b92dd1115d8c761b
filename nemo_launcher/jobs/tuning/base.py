"""Tuning a converted model on the trainer core, any family: what differs from pre-training in the Lightning module.

    tuning = MyTuning(...)                                    # a Tuning: data, the method's tensors, the results
    run_program(argv, prog, schema, load_recipe, build=..., module_class=lambda parts: TuningModule(parts, tuning))

- Samples vary in length: each step's batch is padded by the tuning's `collate` (to the step's longest sample).
- Validation runs over several named files; the loss of each is logged (val_loss_<name>) and their mean is val_loss.
- A method that freezes the base model (LoRA, prompts, adapters, IA3) checkpoints only its own tensors and their
  optimizer state: the base weights come from the `.nemo` again on resume and are never written, so they stay
  bit-identical. Fine-tuning, which trains every weight, checkpoints the whole model as pre-training does.
- Once max_steps is reached, `write_outputs` writes the tuned model (a `.nemo`, an adapter file, ...).
"""

from collections.abc import Sequence
from typing import Any

import torch

from ..core.module import TrainingModule, _mean_of
from ..core.samplers import EvalBatchSampler, make_loader


class Tuning:
    """What a family's tuning job gives the module. Subclasses set the attributes and override what they use."""

    collate: Any = None  # samples -> one padded batch dict
    num_workers: int = 0  # DataLoader worker processes per rank
    validation_sets: Sequence[tuple[str, Any]] = ()  # (name, dataset) per validation file
    freezes_base: bool = False  # only the method's tensors train, and only they are checkpointed

    def sharded_state(self) -> dict[str, Any]:
        """The method's trainable tensors as megatron ShardedTensors (a TP-split tensor says its axis)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Copies a checkpoint's tensors (as sharded_state named them) into the method's parameters."""

    def validation_metrics(self, module: "TuningModule") -> dict[str, float]:
        """Further scores at each validation (exact match of generated answers); every rank calls it."""
        return {}

    def write_outputs(self, module: "TuningModule") -> dict[str, str]:
        """Every rank, once max_steps is reached: writes the results, returns {summary label: path}."""
        return {}


class Method:
    """What a tuning method does to the frozen (or not) base model. Parameters it adds are named for checkpoints."""

    name = "method"
    freezes_base = True
    base_step: Any = None  # the family recipe's forward_step_func; the family's tuning job sets it

    def attach(self, model: torch.nn.Module, job: "Tuning") -> None:
        """Freezes what stays fixed and adds the method's parameters to `model` (before DDP wraps it)."""
        raise NotImplementedError

    def sharded_state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Loads what sharded_state saved."""

    def forward_step(self, data_iterator, model):
        """megatron-core's forward_step_func: the family's own unless the method feeds the model differently."""
        return self.base_step(data_iterator, model)

    def before_generation(self, tokens: torch.Tensor, sample: dict[str, Any]) -> None:
        """Called with each generation window; prompt learning places its virtual tokens here."""

    def write(self, module: "TuningModule", job: "Tuning") -> dict[str, str]:
        """Every rank, once max_steps is reached: writes the results; {summary label: path}."""
        raise NotImplementedError

    def describe(self, model: torch.nn.Module) -> str:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        return f"{self.name}: {trainable:,} trainable of {total:,} parameters on this rank"


class TuningModule(TrainingModule):
    def __init__(self, parts, tuning: Tuning):
        super().__init__(parts)
        self.tuning = tuning
        self._file_losses: list[list[dict[str, torch.Tensor]]] = []

    # ---- data ----------------------------------------------------------------------------------------
    def train_dataloader(self):
        # The tuning's datasets shuffle themselves (a pure function of the seed), so the step order stays exact.
        return self.step_loader(self.tuning.num_workers, collate_fn=self.tuning.collate)

    def val_dataloader(self):
        p = self.parts
        loaders = []
        for _, dataset in self.tuning.validation_sets:
            sampler = EvalBatchSampler(
                len(dataset),
                p.cfg.model.global_batch_size,
                p.cfg.model.micro_batch_size,
                p.dp_rank,
                p.dp_size,
                p.cfg.trainer.limit_val_batches,
            )
            loaders.append(
                make_loader(dataset, sampler, self.tuning.num_workers, p.on_gpu, p.cfg.model.seed, self.tuning.collate)
            )
        return loaders

    # ---- evaluation ----------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._file_losses = [[] for _ in self.tuning.validation_sets]

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        losses = self._evaluate_batch(batch)
        if losses is not None:
            self._file_losses[dataloader_idx].append(losses)

    def on_validation_epoch_end(self) -> None:
        name = self.parts.loss_name
        means, metrics = [], {}
        for (label, _), batches in zip(self.tuning.validation_sets, self._file_losses):
            reduced = self.parts.reduce_last_stage_means(_mean_of(batches))  # a collective: every rank, every file
            if reduced is not None:
                means.append(reduced[name])
                if len(self.tuning.validation_sets) > 1:
                    metrics[f"loss_{label}"] = reduced[name]
        self.last_val_losses = {name: sum(means) / len(means)} if means else None
        metrics.update(self.tuning.validation_metrics(self))
        self.last_val_metrics = metrics

    # ---- checkpoint contents -------------------------------------------------------------------------
    def sharded_model_state(self) -> dict[str, Any]:
        if self.tuning.freezes_base:
            return {"tuned": self.tuning.sharded_state()}
        return super().sharded_model_state()

    def load_model_state(self, state: dict[str, Any]) -> None:
        if self.tuning.freezes_base:
            self.tuning.load_state(state["tuned"])
        else:
            super().load_model_state(state)

    def write_outputs(self) -> dict[str, str]:
        return self.tuning.write_outputs(self)


def flatten(state: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": x}} -> {"a.b": x}: a loaded checkpoint's nested dicts as the flat names sharded_state used."""
    flat: dict[str, Any] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def replicated(tensor: torch.Tensor, key: str):
    """A ShardedTensor of a tensor every TP rank holds whole (identical on all of them)."""
    from megatron.core.utils import make_sharded_tensor_for_checkpoint

    return make_sharded_tensor_for_checkpoint(tensor, key)


def split(tensor: torch.Tensor, key: str, axis: int):
    """A ShardedTensor of this TP rank's slice of a tensor cut along `axis`."""
    from megatron.core.utils import make_tp_sharded_tensor_for_checkpoint

    return make_tp_sharded_tensor_for_checkpoint(tensor, key, tp_axis=axis)


def copy_into(params: dict[str, torch.nn.Parameter], loaded: dict[str, Any], source: str | None = None) -> None:
    """Copies loaded tensors into parameters by name; a missing name is a corrupt checkpoint."""
    missing = sorted(set(params) - set(loaded))
    if missing:
        raise RuntimeError(f"checkpoint {source or ''} lacks {missing[:3]}")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(loaded[name])
