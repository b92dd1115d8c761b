"""The exponential moving average of CLIP's weights (exp_manager.ema): ema = decay x ema + (1 - decay) x weights
after every every_n_steps-th optimizer step.

    average = WeightAverage(parts.bare_chunks, decay=0.9999, every_n_steps=1, offload=False)
    average.update(step)                      # after the optimizer step that made `step` steps
    checkpoint.update(average.sharded_state())  # saved beside the weights, in their TP layout
    with average.swapped_in():                # the chunks hold the average (validation), then their own weights again
        ...

The average lives in one fp32 tensor per parameter (in host memory with offload). Its checkpoint entries are
the chunk's own sharded tensors with the average as data under keys `ema.<name>`, so it reshards to any TP like the
weights. The seed's rule (no EMA with AMP O2) is the schema's: the weights here are the fp32 ones the optimizer steps.
"""
import contextlib
import dataclasses
from typing import Dict, List

import torch

PREFIX = "ema."


class WeightAverage:
    def __init__(self, chunks: List[torch.nn.Module], decay: float, every_n_steps: int, offload: bool):
        self.chunks, self.decay, self.every = chunks, decay, every_n_steps
        self.shadow: List[Dict[str, torch.Tensor]] = [
            {name: p.detach().float().to("cpu" if offload else p.device, copy=True) for name, p in chunk.named_parameters()}
            for chunk in chunks]

    @torch.no_grad()
    def update(self, step: int) -> None:
        if step % self.every:
            return
        for chunk, shadow in zip(self.chunks, self.shadow):
            for name, p in chunk.named_parameters():
                average = shadow[name]
                average.mul_(self.decay).add_(p.detach().to(average.device, average.dtype), alpha=1.0 - self.decay)

    def sharded_state(self) -> Dict[str, Dict]:
        from megatron.core.dist_checkpointing.mapping import ShardedTensor

        state = {}
        for i, (chunk, shadow) in enumerate(zip(self.chunks, self.shadow)):
            entries = chunk.sharded_state_dict(prefix=PREFIX)
            state[f"ema{i}"] = {key: dataclasses.replace(entry, data=shadow[key[len(PREFIX):]], dtype=torch.float32)
                                for key, entry in entries.items()
                                if isinstance(entry, ShardedTensor) and key[len(PREFIX):] in shadow}
        return state

    @torch.no_grad()
    def load(self, loaded: Dict[str, Dict]) -> None:
        for i, shadow in enumerate(self.shadow):
            for key, tensor in loaded[f"ema{i}"].items():
                shadow[key[len(PREFIX):]].copy_(tensor)

    @contextlib.contextmanager
    def swapped_in(self):
        kept = [{name: p.detach().clone() for name, p in chunk.named_parameters()} for chunk in self.chunks]
        self._copy_into_chunks(self.shadow)
        try:
            yield
        finally:
            self._copy_into_chunks(kept)

    @torch.no_grad()
    def _copy_into_chunks(self, values: List[Dict[str, torch.Tensor]]) -> None:
        for chunk, source in zip(self.chunks, values):
            for name, p in chunk.named_parameters():
                p.copy_(source[name].to(p.device, p.dtype))
