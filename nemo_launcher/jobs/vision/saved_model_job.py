"""What every one-process job over a saved vision model does around its own work: bind the config, hold the run
directory's lock, load the `.nemo` for the family the config is for, print the summary, and turn the errors a user
fixes into one `Error:` line (exit 2 for a config value, a JobFault's own status otherwise).

    def work(cfg, log) -> Summary: ...
    sys.exit(run_saved_model_job(argv, PROG, VitClassifyConfig, "fw_inference", work))
    saved = load_for(cfg, "vit", "fw_inference")                # SavedVisionModel at trainer.precision

Used by fw_inference (vit.classify, clip.similarity) and export (vision.export).
"""

import time
from collections.abc import Callable
from pathlib import Path

from ..common.config import JobConfigError


def run_saved_model_job(argv, prog: str, schema, stage: str, work: Callable) -> int:
    started = time.monotonic()
    from ..common.config import config_path_from_argv, load_resolved_config
    from ..common.quiet import start_job
    from ..common.report import JobFault, duration, print_error
    from ..common.run_directory import claimed

    try:
        path = config_path_from_argv(argv, prog=prog)
        start_job(0)
        cfg = schema.from_dict(load_resolved_config(path), stage)
        with claimed(cfg.run.results_dir, rank=0):
            summary = work(cfg)
        summary.add("time", duration(time.monotonic() - started)).show(0)
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0


def load_for(cfg, family: str, stage: str, precision: str | None = None):
    """The saved model of `cfg.model.restore_from_path`, refused unless it is of `family`. precision: the dtype to
    compute in; by default trainer.precision (null there: the saved weights' own)."""
    import torch

    from .saved_models import load_vision_model

    if cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():
        raise JobConfigError(
            f"{stage}.trainer.accelerator=gpu: CUDA is not available on this machine; set "
            f"{stage}.trainer.accelerator=cpu"
        )
    path = Path(cfg.model.restore_from_path)
    if not path.is_file():
        raise JobConfigError(
            f"{stage}.model.restore_from_path={str(path)!r}: no such file; name the .nemo a {family} "
            "training, fine-tuning or conversion run wrote"
        )
    saved = load_vision_model(path, precision or cfg.trainer.dtype())
    if saved.family != family:
        raise JobConfigError(
            f"{stage}.model.restore_from_path={str(path)!r}: holds a {saved.family} model; "
            f"{stage}={family}/... needs a {family} .nemo"
        )
    return saved
