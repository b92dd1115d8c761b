"""Continued pretraining: a new run's model starts from the weights of a checkpoint folder instead of random ones.

    load_starting_weights(chunks, "/results/hf_llama2/convert_hf_llama2_to_nemo/results/checkpoints/step-0")

`model.restore_from_path` names a complete megatron-core checkpoint folder: the one conversion_hf2nemo writes for an
imported Hugging Face model (weights only), or a step-<N> folder of another training run. Only the model's weights
are read, resharded to this run's TP/PP by dist_checkpointing; the optimizer, the step count and the data position
start afresh (resume_from_checkpoint continues a run instead). Called on the bare chunks before the optimizer copies
their weights into its fp32 master copy.
"""

from pathlib import Path

import torch

from ..common.config import JobConfigError
from .nemo_archive import load_weights


def load_starting_weights(chunks: list[torch.nn.Module], folder: str) -> None:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.core import CheckpointingException

    from ...contract import CHECKPOINT_COMPLETE_MARKER

    if not (Path(folder) / CHECKPOINT_COMPLETE_MARKER).is_file():
        raise JobConfigError(
            f"model.restore_from_path: {folder} is not a complete checkpoint folder (no {CHECKPOINT_COMPLETE_MARKER}); "
            "name the results/checkpoints/step-0 folder conversion_hf2nemo wrote, or a training run's step-<N>"
        )
    # _extra_state entries (Transformer Engine's FP8 metadata) belong to the layer spec, not to the weights.
    template = {
        f"model{i}": {k: v for k, v in chunk.sharded_state_dict().items() if not k.endswith("._extra_state")}
        for i, chunk in enumerate(chunks)
    }
    try:
        loaded = dist_checkpointing.load(template, folder)
    except CheckpointingException as error:
        raise JobConfigError(
            f"model.restore_from_path: {folder}: its weights do not fit the model this config describes ({error}); "
            "give the run the checkpoint's architecture (layers, widths, heads, query groups, experts)"
        ) from None
    for i, chunk in enumerate(chunks):
        load_weights(chunk, loaded[f"model{i}"], folder)
