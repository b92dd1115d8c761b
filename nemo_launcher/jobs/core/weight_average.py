"""The exponential moving average of the trained weights (exp_manager.ema: CLIP, Stable Diffusion and its fine-tunes):
ema = decay x ema + (1 - decay) x weights after every every_n_steps-th optimizer step.

    average = WeightAverage(parts.bare_chunks, decay=0.9999, every_n_steps=1, offload=False)
    average.update(step)                      # after the optimizer step that made `step` steps
    checkpoint.update(average.sharded_state())  # saved beside the weights, in their TP layout
    with average.swapped_in():                # the chunks hold the average (validation), then their own weights again
        trainer.validate(module)

`AveragingModule` is the trainer core's module with such an average: updated after optimizer steps, saved in every
checkpoint and restored on resume, and swapped in for validation unless ema.validate_original_weights.

The average lives in one fp32 tensor per trained parameter (in host memory with offload); frozen ones (Stable
Diffusion's VAE and text encoder) equal their own average, so they have none. Its checkpoint entries are
the chunk's own sharded tensors with the average as data under keys `ema.<name>`, so it reshards to any TP like the
weights. The seed's rule (no EMA with AMP O2) is the schema's: the weights here are the fp32 ones the optimizer steps.
"""

import contextlib
import dataclasses

import torch

from .module import TrainingModule

PREFIX = "ema."


class WeightAverage:
    def __init__(self, chunks: list[torch.nn.Module], decay: float, every_n_steps: int, offload: bool):
        self.chunks, self.decay, self.every = chunks, decay, every_n_steps
        self.shadow: list[dict[str, torch.Tensor]] = [
            {
                name: p.detach().float().to("cpu" if offload else p.device, copy=True)
                for name, p in chunk.named_parameters()
                if p.requires_grad
            }
            for chunk in chunks
        ]

    @torch.no_grad()
    def update(self, step: int) -> None:
        if step % self.every:
            return
        for chunk, shadow in zip(self.chunks, self.shadow):
            for name, p in chunk.named_parameters():
                average = shadow.get(name)
                if average is None:
                    continue
                average.mul_(self.decay).add_(p.detach().to(average.device, average.dtype), alpha=1.0 - self.decay)

    def sharded_state(self) -> dict[str, dict]:
        from megatron.core.dist_checkpointing.mapping import ShardedTensor

        state = {}
        for i, (chunk, shadow) in enumerate(zip(self.chunks, self.shadow)):
            entries = chunk.sharded_state_dict(prefix=PREFIX)
            state[f"ema{i}"] = {
                key: dataclasses.replace(entry, data=shadow[key[len(PREFIX) :]], dtype=torch.float32)
                for key, entry in entries.items()
                if isinstance(entry, ShardedTensor) and key[len(PREFIX) :] in shadow
            }
        return state

    @torch.no_grad()
    def load(self, loaded: dict[str, dict]) -> None:
        for i, shadow in enumerate(self.shadow):
            for key, tensor in loaded[f"ema{i}"].items():
                shadow[key[len(PREFIX) :]].copy_(tensor)

    @contextlib.contextmanager
    def swapped_in(self):
        kept = [
            {name: p.detach().clone() for name, p in chunk.named_parameters() if name in shadow}
            for chunk, shadow in zip(self.chunks, self.shadow)
        ]
        self._copy_into_chunks(self.shadow)
        try:
            yield
        finally:
            self._copy_into_chunks(kept)

    @torch.no_grad()
    def _copy_into_chunks(self, values: list[dict[str, torch.Tensor]]) -> None:
        for chunk, source in zip(self.chunks, values):
            for name, p in chunk.named_parameters():
                if name in source:
                    p.copy_(source[name].to(p.device, p.dtype))


class AveragingModule(TrainingModule):
    """The core's module with exp_manager.ema's average of the trained weights (`self.average`, None when off)."""

    def __init__(self, parts):
        super().__init__(parts)
        ema = parts.cfg.exp_manager.ema
        self.average = (
            WeightAverage(parts.bare_chunks, ema.decay, ema.every_n_steps, ema.cpu_offload) if ema.enable else None
        )
        self._validate_average = self.average is not None and not ema.validate_original_weights
        self._swap = None

    def training_step(self, batch, batch_idx):
        super().training_step(batch, batch_idx)
        if self.average is not None:
            self.average.update(self.last_step.step)

    def averaged_weights(self):
        """A context in which the chunks hold the average (the trained weights when EMA is off)."""
        return self.average.swapped_in() if self.average is not None else contextlib.nullcontext()

    def on_validation_epoch_start(self) -> None:
        if self._validate_average:
            self._swap = self.average.swapped_in()
            self._swap.__enter__()
        super().on_validation_epoch_start()

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        if self._swap is not None:
            self._swap.__exit__(None, None, None)
            self._swap = None

    def sharded_extra_state(self):
        state = super().sharded_extra_state()
        if self.average is not None:
            state["ema"] = self.average.sharded_state()
        return state

    def sharded_extra_state_to_load(self, saved_layout):
        template = super().sharded_extra_state_to_load(saved_layout)
        if self.average is not None:
            template["ema"] = self.average.sharded_state()
        return template

    def restore_extra_state(self, loaded) -> None:
        super().restore_extra_state(loaded)
        if self.average is not None:
            self.average.load(loaded["ema"])
