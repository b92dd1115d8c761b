"""How the PPO actor's processes work together: with tensor parallelism every rank runs the same loop on the same
tokens (TP splits the model, not the data), rank 0 alone talks to the servers and shares their answers, and the
gradient norm that clipping reads counts each tensor-parallel shard once.

    parallel = Parallel(rank, world_size)
    answers = parallel.share(lambda: roles.rewards(tokens))     # computed on rank 0, the same object everywhere
    norm = gradient_norm(parameters, tensor_parallel_shards(model))
"""

from collections.abc import Callable

import torch


class Parallel:
    """How the actor's processes agree: every rank runs the same loop on the same tokens (tensor parallelism splits
    the model, not the data); rank 0 alone talks to the servers and shares their answers."""

    def __init__(self, rank: int = 0, world_size: int = 1):
        self.rank, self.world_size = rank, world_size

    def share(self, compute: Callable[[], object]) -> object:
        """compute() on rank 0, its result on every rank (an exception on rank 0 is re-raised everywhere)."""
        if self.world_size == 1:
            return compute()
        import torch.distributed as dist

        box: list[object] = [None]
        if self.rank == 0:
            try:
                box[0] = ("ok", compute())
            except Exception as error:  # noqa: BLE001 - every rank raises it after the broadcast
                box[0] = ("error", error)
        dist.broadcast_object_list(box, src=0)
        kind, value = box[0]
        if kind == "error":
            raise value
        return value

    def any(self, flag: bool) -> bool:
        """Whether any rank has `flag` (a stop signal reaches the ranks at slightly different moments)."""
        if self.world_size == 1:
            return flag
        import torch.distributed as dist

        value = torch.tensor([1 if flag else 0])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()


def gradient_norm(parameters: list[torch.nn.Parameter], sharded: set[int]) -> torch.Tensor:
    """The global L2 norm of the gradients: tensor-parallel shards (ids in `sharded`, parallel_grads.py) summed over
    the TP group, replicated parameters counted once."""
    shards = torch.zeros((), dtype=torch.float32)
    replicated = torch.zeros((), dtype=torch.float32)
    for parameter in parameters:
        if parameter.grad is None:
            continue
        squares = parameter.grad.detach().float().pow(2).sum().cpu()
        if id(parameter) in sharded:
            shards += squares
        else:
            replicated += squares
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized() and parallel_state.get_tensor_model_parallel_world_size() > 1:
        import torch.distributed as dist

        device = parameters[0].device
        shards = shards.to(device)
        dist.all_reduce(shards, group=parallel_state.get_tensor_model_parallel_group())
        shards = shards.cpu()
    return (shards + replicated).sqrt()
