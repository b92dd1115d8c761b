"""Conversion: a BERT training checkpoint (megatron-core distributed checkpoint) -> one `.nemo` file in the TP x PP
layout asked for, and a Hugging Face checkpoint where an architecture computes the same model exactly.

    python3 -u -m nemo_launcher.jobs.bert.convert --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.bert.convert --config ...     (target TP x PP = 2)

One process per rank of the target layout (model.tensor_model_parallel_size x pipeline_model_parallel_size; more
processes are allowed and idle). Each builds its part of the model and lets dist_checkpointing read its slice of
the checkpoint, whatever TP/PP it was trained with: that is the resharding. The result goes to
<run.results_dir>/results/<run.nemo_file_name>, written under a temporary name and renamed. Hugging Face
(`hf.mode`): MegatronBertForPreTraining for gelu BERTs with learned positions (hf_export.py says why no other
class fits); for anything else `auto` logs why nothing was written and `required` fails. Rank 0 holds
run.results_dir's lock while it runs. Exit codes: 0 done, 2 configuration error, 74 a write failed for lack of
space or permission, 75 run.results_dir is in use by another job (one `Error:` line each), anything else a crash.

Only the standard library is imported at module level: megatron's checkpoint code may spawn a helper process that
re-imports this module.
"""

import sys

from ...contract.schemas.bert_conversion import BertConversionConfig
from ..core.entry import conversion_main

main = conversion_main("nemo_launcher.jobs.bert.convert", BertConversionConfig, f"{__package__}.converter", "BERT")

if __name__ == "__main__":
    sys.exit(main())
