"""Conversion of T5 and mT5: a training checkpoint (megatron-core distributed checkpoint) -> one `.nemo` file at the
TP asked for, and a Hugging Face checkpoint where T5ForConditionalGeneration / MT5ForConditionalGeneration computes
the same model exactly.

    python3 -u -m nemo_launcher.jobs.t5.convert --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.t5.convert --config ...     (target TP = 2)

One process per rank of the target TP (model.tensor_model_parallel_size; PP is 1 for a T5; more processes are
allowed and idle). Each builds its part of the T5Model and lets dist_checkpointing read its slice of the
checkpoint, whatever TP it was trained with: that is the resharding (jobs/core/conversion.py, every family's flow).
The result goes to <run.results_dir>/results/<run.nemo_file_name> (megatron_t5.nemo, megatron_mt5.nemo) with the
vocabulary packed in (T5's vocab.txt, mT5's SentencePiece model), written under a temporary name and renamed.
Hugging Face (`hf.mode`; hf_export.py says when a class fits): `auto` exports where one does and logs why not
otherwise, `required` fails instead, `off` skips it. Rank 0 holds run.results_dir's lock while it runs. Exit codes:
0 done, 2 configuration error, 74 a write failed for lack of space or permission, 75 run.results_dir is in use by
another job (one `Error:` line each), anything else a crash.

Only the standard library is imported at module level: megatron's checkpoint code may spawn a helper process that
re-imports this module.
"""

import sys

from ...contract.schemas.t5_conversion import T5ConversionConfig
from ..core.entry import conversion_main

main = conversion_main("nemo_launcher.jobs.t5.convert", T5ConversionConfig, f"{__package__}.converter", "T5")

if __name__ == "__main__":
    sys.exit(main())
