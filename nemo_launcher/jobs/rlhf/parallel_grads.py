"""Which parameters of a megatron-core model are tensor-parallel shards, for a global gradient norm that counts every
weight once (each rank's shards summed over the tensor-parallel group, the replicated parameters taken once).

    sharded = tensor_parallel_shards(model)      # ids of the sharded parameters
    squares = sum(p.grad.norm() ** 2 for p in params if id(p) in sharded or tp_rank == 0)   # then all-reduce over TP

megatron marks its sharded parameters with `tensor_model_parallel`, but only where it initialises them: a model built
for inference and then loaded from a .nemo (core/standalone.py's builders skip the initialisation) has the flag on the
column-parallel biases and not on the weights. Read from the layer types, the answer does not depend on how the model
was built.
"""

import torch


def tensor_parallel_shards(model: torch.nn.Module) -> set[int]:
    """ids of the parameters each tensor-parallel rank holds a different slice of: megatron's column-parallel weights
    and biases, row-parallel weights (their bias is added after the reduction: whole on every rank) and the
    vocabulary-parallel embedding. Read from the layer types, not from megatron's `tensor_model_parallel` flag, which
    weights loaded from a .nemo do not all carry (seen on the reward model's linear weights)."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding

    sharded = {id(p) for p in model.parameters() if getattr(p, "tensor_model_parallel", False)}
    for module in model.modules():
        if isinstance(module, (ColumnParallelLinear, VocabParallelEmbedding)):
            sharded.update(id(p) for p in module.parameters(recurse=False))
        elif isinstance(module, RowParallelLinear):
            sharded.add(id(module.weight))
    return sharded
