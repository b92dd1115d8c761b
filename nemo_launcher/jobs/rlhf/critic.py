"""The PPO critic's learning: the value loss over the actor's rollouts, its optimizer, and its saved states.

    trainer = ValueTrainer(model, settings, log_dir="<critic explicit_log_dir>", vocab_size=2048)
    trainer.train(payload)     # POST /train: ppo_epochs passes, micro-batches, DP all-reduce, clipping -> {"loss", ...}
    trainer.save(step)         # POST /save:  <log_dir>/critic_states/step-<N>/rank_<tp>.pt + COMPLETE, atomically
    trainer.load(step)         # POST /load:  weights, optimizer, step counter and RNG as saved for actor step N

The model is the scalar-head GPT of reward_model.py: its scalar at position t is V(tokens[:t+1]). For a rollout with
its response starting at `response_start`, generated token k (k = response_start .. len-1) was chosen in the state
before it, position k-1: entry j of "returns" and "old_values" belongs to values[response_start - 1 + j].

Loss of one optimizer step (PPO value clipping when loss_clip_val > 0, as in Schulman et al. 2017's implementations):
    V' = old + clamp(V - old, -clip, clip)
    loss = 0.5 x mean over the step's response tokens of max((V - R)^2, (V' - R)^2)
Every token of the global batch weighs the same, whichever rank or micro-batch holds it. Each /train makes
`epochs` passes over the rows in an order drawn from a generator seeded by (seed, the actor's step, the pass), never
from the global RNG, so a critic restored with /load N and sent step N+1's batch repeats the uninterrupted run exactly.

The optimizer is torch's AdamW on fp32 weights (no weight decay on biases and norm weights); bf16/fp16 run the forward
under autocast. Gradients are summed over the data-parallel ranks (each rank has its share of every global batch) and
clipped by their global norm, tensor-parallel shards counted once. Each tensor-parallel rank's state goes to its own
file, written by its first data-parallel rank (the others hold the same numbers).
"""

import contextlib
import dataclasses
import math
import os
import shutil
from pathlib import Path

import torch

from ...contract import CHECKPOINT_COMPLETE_MARKER, CHECKPOINT_STEP_PREFIX
from ..common.storage import guarded_write
from ..core.schedule import CosineSchedule
from .parallel_grads import tensor_parallel_shards
from .remote import RequestError
from .servers import max_positions, model_device, padded, token_rows
from .step_folders import complete_step_folders

STATES = "critic_states"


@dataclasses.dataclass(frozen=True)
class CriticSettings:
    micro_batch_size: int  # rows per forward/backward pass on each data-parallel rank
    global_batch_size: int  # rows per optimizer step, over all data-parallel ranks
    epochs: int  # passes over each /train batch
    loss_clip: float  # 0: no value clipping
    gradient_clip: float  # 0: no clipping
    weight_decay: float
    betas: tuple[float, float]
    schedule: CosineSchedule  # learning rate by critic optimizer step
    seed: int
    keep: int  # newest complete saved states kept
    autocast_dtype: torch.dtype | None = None  # bf16/fp16 forward; None: fp32


@dataclasses.dataclass(frozen=True)
class TrainBatch:
    rows: list[list[int]]
    response_start: list[int]
    returns: list[list[float]]
    old_values: list[list[float]]
    step: int


def train_batch(payload: dict, vocab_size: int, max_length: int) -> TrainBatch:
    """The /train payload checked: one response_start per row (1 <= start < len: a value before every generated
    token), and returns/old_values with one entry per generated token."""
    rows = token_rows(payload, vocab_size, max_length)
    starts, returns, old = payload.get("response_start"), payload.get("returns"), payload.get("old_values")
    step = payload.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise RequestError(f"'step' must be the actor's PPO step (an integer >= 1), got {step!r}")
    for name, value in (("response_start", starts), ("returns", returns), ("old_values", old)):
        if not isinstance(value, list) or len(value) != len(rows):
            raise RequestError(f"'{name}' must hold one entry per row ({len(rows)})")
    for i, (row, start) in enumerate(zip(rows, starts, strict=True)):
        if not isinstance(start, int) or not 1 <= start < len(row):
            raise RequestError(f"response_start[{i}]={start!r} must be in [1, {len(row) - 1}] for a row of {len(row)}")
        generated = len(row) - start
        for name, value in (("returns", returns[i]), ("old_values", old[i])):
            if not isinstance(value, list) or len(value) != generated:
                raise RequestError(f"{name}[{i}] must hold {generated} numbers, one per generated token")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value):
                raise RequestError(f"{name}[{i}] must hold finite numbers")
    return TrainBatch(rows, starts, returns, old, step)


def value_loss_sum(
    values: torch.Tensor, batch: TrainBatch, rows: list[int], loss_clip: float
) -> tuple[torch.Tensor, int]:
    """(0.5 x the summed per-token value loss of `rows`, their token count) from the per-position values [len(rows),
    width] of those rows."""
    device = values.device
    counts = [len(batch.rows[i]) - batch.response_start[i] for i in rows]
    width = max(counts)
    index = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width))
    target = torch.zeros((len(rows), width))
    old = torch.zeros((len(rows), width))
    for r, (i, count) in enumerate(zip(rows, counts, strict=True)):
        index[r, :count] = torch.arange(batch.response_start[i] - 1, batch.response_start[i] - 1 + count)
        mask[r, :count] = 1.0
        target[r, :count] = torch.tensor(batch.returns[i], dtype=torch.float32)
        old[r, :count] = torch.tensor(batch.old_values[i], dtype=torch.float32)
    index, mask, target, old = index.to(device), mask.to(device), target.to(device), old.to(device)
    predicted = values.float().gather(1, index)
    error = (predicted - target) ** 2
    if loss_clip > 0:
        clipped = old + (predicted - old).clamp(-loss_clip, loss_clip)
        error = torch.maximum(error, (clipped - target) ** 2)
    return 0.5 * (error * mask).sum(), sum(counts)


def _decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases, norm weights and other vectors keep theirs (as megatron does)."""
    decay, plain = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.dim() > 1 else plain).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


class ValueTrainer:
    """Trains and saves the critic; every rank of the role runs each call with the same payload."""

    def __init__(self, model: torch.nn.Module, settings: CriticSettings, log_dir: str, vocab_size: int):
        from megatron.core import parallel_state

        self.model, self.settings, self.log_dir, self.vocab_size = model, settings, Path(log_dir), vocab_size
        self.optimizer = torch.optim.AdamW(
            _decay_groups(model, settings.weight_decay), lr=settings.schedule(0), betas=settings.betas
        )
        self.optimizer_steps = 0  # critic optimizer steps taken: the schedule's position
        self.dp_size = parallel_state.get_data_parallel_world_size()
        self.dp_rank = parallel_state.get_data_parallel_rank()
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self._dp_group = parallel_state.get_data_parallel_group() if self.dp_size > 1 else None
        tp = parallel_state.get_tensor_model_parallel_world_size()
        self._tp_group = parallel_state.get_tensor_model_parallel_group() if tp > 1 else None
        self._sharded = tensor_parallel_shards(model)

    # -- /train -----------------------------------------------------------------------------------------------------

    def train(self, payload: dict) -> dict:
        from .reward_model import scores

        s = self.settings
        batch = train_batch(payload, self.vocab_size, max_positions(self.model))
        count = len(batch.rows)
        losses, norms, first_step = [], [], self.optimizer_steps
        self.model.train()
        try:
            for epoch in range(s.epochs):
                order = torch.randperm(count, generator=_generator(s.seed, batch.step, epoch)).tolist()
                for first in range(0, count, s.global_batch_size):
                    rows_of_step = order[first : first + s.global_batch_size]
                    tokens_of_step = sum(len(batch.rows[i]) - batch.response_start[i] for i in rows_of_step)
                    mine = _share(rows_of_step, self.dp_rank, self.dp_size)
                    self.optimizer.zero_grad(set_to_none=False)
                    step_loss = torch.zeros(())
                    for m in range(0, len(mine), s.micro_batch_size):
                        rows = mine[m : m + s.micro_batch_size]
                        tokens, lengths = padded([batch.rows[i] for i in rows], model_device(self.model))
                        with self._autocast():
                            values = scores(self.model, tokens, lengths)
                        loss_sum, _ = value_loss_sum(values, batch, rows, s.loss_clip)
                        (loss_sum / tokens_of_step).backward()
                        step_loss += loss_sum.detach().float().cpu()
                    losses.append(self._sum_over_data_parallel_ranks(step_loss) / tokens_of_step)
                    norms.append(self._reduce_and_clip())
                    for group in self.optimizer.param_groups:
                        group["lr"] = s.schedule(self.optimizer_steps)
                    self.optimizer.step()
                    self.optimizer_steps += 1
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()
        return {
            "loss": sum(losses) / len(losses),
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "grad_norm": sum(norms) / len(norms),
            "optimizer_steps": self.optimizer_steps - first_step,
            "lr": s.schedule(max(0, self.optimizer_steps - 1)),
        }

    def _autocast(self):
        dtype = self.settings.autocast_dtype
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=model_device(self.model).type, dtype=dtype)

    def _sum_over_data_parallel_ranks(self, value: torch.Tensor) -> float:
        if self._dp_group is None:
            return float(value)
        total = value.to(model_device(self.model))
        torch.distributed.all_reduce(total, group=self._dp_group)
        return float(total)

    def _reduce_and_clip(self) -> float:
        """Sums the gradients over the data-parallel ranks, then scales them to the global norm limit; returns the
        norm before clipping."""
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            if self._dp_group is not None:
                torch.distributed.all_reduce(parameter.grad, group=self._dp_group)
        # Each rank adds its shards and, on tensor-parallel rank 0 only, the replicated parameters; the sum over the
        # tensor-parallel group then counts every weight once.
        counted = [p for p in parameters if id(p) in self._sharded or self.tp_rank == 0]
        squares = sum((p.grad.float().norm() ** 2 for p in counted), torch.zeros((), device=model_device(self.model)))
        if self._tp_group is not None:
            torch.distributed.all_reduce(squares, group=self._tp_group)
        norm = float(squares.sqrt())
        limit = self.settings.gradient_clip
        if limit > 0 and norm > limit:
            for parameter in parameters:
                parameter.grad.mul_(limit / (norm + 1e-6))
        return norm

    # -- /save and /load --------------------------------------------------------------------------------------------

    def folder(self, step: int) -> Path:
        return self.log_dir / STATES / f"{CHECKPOINT_STEP_PREFIX}{step}"

    def save(self, step: int) -> str:
        """Writes this rank's state for actor step `step` (first data-parallel rank of each tensor-parallel rank),
        then, once every file is there, the COMPLETE marker; older complete states beyond `keep` are removed."""
        folder = self.folder(step)
        several = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
        leader = not several or torch.distributed.get_rank() == 0
        if leader:
            # A rerun saving a step again (after a resume) first withdraws the old marker: a kill between the ranks'
            # files must not leave a COMPLETE folder of mixed attempts.
            (folder / CHECKPOINT_COMPLETE_MARKER).unlink(missing_ok=True)
        if several:
            torch.distributed.barrier()
        if self.dp_rank == 0:
            folder.mkdir(parents=True, exist_ok=True)
            state = {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "optimizer_steps": self.optimizer_steps,
                "rng": _rng_state(),
                "step": step,
            }
            target = folder / f"rank_{self.tp_rank}.pt"
            temporary = folder / f".rank_{self.tp_rank}.pt.tmp{os.getpid()}"
            # Weights, and Adam's two moments of each: a full disk stops the role with exit 74 (the actor is told).
            needed = 3 * sum(p.numel() * p.element_size() for p in self.model.parameters())
            with guarded_write(folder, needed, f"the critic state of step {step}", "free space, then resubmit"):
                try:
                    torch.save(state, temporary)
                    os.replace(temporary, target)
                finally:
                    temporary.unlink(missing_ok=True)
        if several:
            torch.distributed.barrier()  # every rank's file is in place before the marker says so
        if leader:
            marker = folder / CHECKPOINT_COMPLETE_MARKER
            temporary = folder / f".{CHECKPOINT_COMPLETE_MARKER}.tmp"
            temporary.write_text(f"PPO critic state after actor step {step}\n")
            os.replace(temporary, marker)
            for _, old in self.complete_states()[: -self.settings.keep]:
                if old != folder:
                    shutil.rmtree(old, ignore_errors=True)
        return str(folder)

    def complete_states(self) -> list[tuple[int, Path]]:
        """(actor step, folder) of every complete saved state, oldest first."""
        return complete_step_folders(self.log_dir / STATES)

    def load(self, step: int) -> str:
        folder = self.folder(step)
        if not (folder / CHECKPOINT_COMPLETE_MARKER).is_file():
            have = ", ".join(str(s) for s, _ in self.complete_states()) or "none"
            raise RequestError(f"no complete critic state for actor step {step} in {folder.parent} (have: {have})")
        # weights_only=False: the state holds Python-level RNG states besides tensors; the file is this run's own.
        state = torch.load(folder / f"rank_{self.tp_rank}.pt", map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer_steps = int(state["optimizer_steps"])
        _set_rng_state(state["rng"])
        return str(folder)


def _share(rows: list[int], rank: int, size: int) -> list[int]:
    """This data-parallel rank's rows of a global batch: contiguous equal shares (the schema makes the batch a
    multiple of micro-batch x DP; a shorter last batch gives the last ranks fewer rows, or none)."""
    per_rank = math.ceil(len(rows) / size)
    return rows[rank * per_rank : (rank + 1) * per_rank]


def _generator(seed: int, step: int, epoch: int) -> torch.Generator:
    # Distinct streams per (step, pass); the multipliers keep (step, epoch) pairs from colliding.
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + epoch)


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
        with contextlib.suppress(Exception):  # megatron's tracker exists once the parallel state was seeded
            from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

            state["tracker"] = get_cuda_rng_tracker().get_states()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "tracker" in state:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        get_cuda_rng_tracker().set_states(state["tracker"])
