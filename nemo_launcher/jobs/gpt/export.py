"""Export a GPT `.nemo` to a Triton model repository whose Python backend generates text.

    python3 -u -m nemo_launcher.jobs.gpt.export --config <job dir>/<run.name>_hydra.yaml

Reads the resolved `export` section and writes triton_deployment.triton_model_dir:

    <model_repo>/<model name>/config.pbtxt   backend python, max_batch_size, tensors, instances, parameters
    <model_repo>/<model name>/1/model.py     the backend (nemo_launcher/jobs/serving/triton_text_model.py)
    <model_repo>/<model name>/1/model.nemo   the weights in model.weight_data_type, and the tokenizer files

The model name is the folder's name. The work is serving/triton_export.py's, with GPT's rule for merging shards.
A TP/PP-sharded `.nemo` is merged into one model. The folder is built beside its final place and swapped in when
complete, so a server never sees half an export.
Holds run.results_dir's lock while it runs. Needs no GPU. Exit codes: 0 done, 2 configuration error, 74 a
write failed for lack of space or permission, 75 run.results_dir is in use by another job (one `Error:` line
on stderr for each), anything else a crash.
"""

import sys
from collections.abc import Callable
from pathlib import Path

from ...contract.schemas.gpt_export import ExportConfig
from ..serving import triton_export


def export(cfg: ExportConfig, load: Callable | None = None, generator: str | None = None) -> Path:
    """load: path -> (model config, full state dict); by default GPT's (any TP/PP, merged)."""
    return triton_export.export(cfg, load or _load_gpt_nemo, generator)


def main(argv=None) -> int:
    return triton_export.run_export(argv, "python3 -m nemo_launcher.jobs.gpt.export", ExportConfig, load=_load_gpt_nemo)


def _load_gpt_nemo(path):
    """Imported when the export runs, after the job's warning filters are in place (it loads torch)."""
    from .inference import load_gpt_nemo

    return load_gpt_nemo(path)


if __name__ == "__main__":
    sys.exit(main())
