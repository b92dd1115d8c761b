"""Export a GPT `.nemo` to a Triton model repository whose Python backend generates text.

    python3 -u -m nemo_launcher.jobs.gpt.export --config <job dir>/<run.name>_hydra.yaml

Reads the resolved `export` section and writes triton_deployment.triton_model_dir:

    <model_repo>/<model name>/config.pbtxt   backend python, max_batch_size, tensors, instances, parameters
    <model_repo>/<model name>/1/model.py     the backend (nemo_launcher/jobs/serving/triton_text_model.py)
    <model_repo>/<model name>/1/model.nemo   the weights in model.weight_data_type, and the tokenizer files

The model name is the folder's name. The work is serving/triton_export.py's, with GPT's rule for merging shards.
A `.nemo` converted at TP/PP > 1 is gathered into one model (a Python backend instance is one process), after its
model_config.yaml has been checked against model.tensor_model_parallel_size and
triton_deployment.pipeline_model_parallel_size (exit 2 when they differ). The folder is built beside its final
place and swapped in when complete, so a server never sees half an export.
Holds run.results_dir's lock while it runs. Needs no GPU. Exit codes: 0 done, 2 configuration error, 74 a
write failed for lack of space or permission, 75 run.results_dir is in use by another job (one `Error:` line
on stderr for each), anything else a crash.
"""

import sys
from collections.abc import Callable
from pathlib import Path

from ...contract.binding import config_fault
from ...contract.model_facts import NEMO_CONFIG_MEMBER, ModelFileError, read_nemo_config
from ...contract.schemas.gpt_export import STAGE, ExportConfig
from ..serving import triton_export


def export(cfg: ExportConfig, load: Callable | None = None, generator: str | None = None) -> Path:
    """load: path -> (model config, full state dict); by default GPT's (any TP/PP, merged).
    The stated TP/PP are checked against the archive first: a JobConfigError before any weight is read."""
    check_archive_layout(cfg)
    return triton_export.export(cfg, load or _load_gpt_nemo, generator)


def main(argv=None) -> int:
    return triton_export.run_export(argv, "python3 -m nemo_launcher.jobs.gpt.export", ExportConfig, job=export)


def check_archive_layout(cfg: ExportConfig) -> None:
    """The schema's rule on the .nemo as it is now (the launcher checked it only if the file was already there),
    read as the launcher reads it: the archive's model_config.yaml alone."""
    path = cfg.model.checkpoint_path
    try:
        section = read_nemo_config(path)
    except ModelFileError as error:
        raise config_fault(f"{STAGE}.model.checkpoint_path", path, str(error)) from None
    cfg.check_model_section(STAGE, section, f"{path} (its {NEMO_CONFIG_MEMBER})")


def _load_gpt_nemo(path):
    """Imported when the export runs, after the job's warning filters are in place (it loads torch)."""
    from .inference import load_gpt_nemo

    return load_gpt_nemo(path)


if __name__ == "__main__":
    sys.exit(main())
