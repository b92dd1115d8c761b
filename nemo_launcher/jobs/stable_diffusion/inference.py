"""What text2img and edit_cli share: the bound config, the model in the configured precision, the closing summary."""

import json
import time
from pathlib import Path

PROG = "python3 -m nemo_launcher.jobs.stable_diffusion.{}"


def run_program(name: str, schema, work, argv=None) -> int:
    """Binds `--config` to `schema`, loads the model and calls work(cfg, parts, output folder) -> Summary."""
    started = time.monotonic()
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
    from ..common.quiet import start_job
    from ..common.report import duration, print_error

    try:
        path = config_path_from_argv(argv, prog=PROG.format(name))
        start_job(0)
        cfg = schema.from_dict(load_resolved_config(path))
        parts = load_model(cfg)
        summary = work(cfg, parts)
    except JobConfigError as error:
        return print_error(error)
    summary.add("time", duration(time.monotonic() - started))
    summary.show(0)
    return 0


def load_model(cfg):
    import torch

    from ...contract.schemas.sd_inference import torch_dtype_name
    from .model import load_stable_diffusion

    device = "cuda" if cfg.trainer.accelerator == "gpu" else "cpu"
    parts = load_stable_diffusion(cfg.model.restore_from_path, device=device)
    dtype = getattr(torch, torch_dtype_name(cfg.trainer))
    for network in (parts.unet, parts.vae, parts.text_encoder):
        # torch's own Module.to: diffusers' override logs a warning about modules to keep in float32 on every cast,
        # even to float32, and these networks have none.
        torch.nn.Module.to(network, dtype)
    return parts


def output_folder(path: str) -> Path:
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_results(summary, output: Path, results_file: str, report: dict, images: str):
    """Writes `report` to <output>/<results_file> and ends the summary with the images written and that file."""
    (output / results_file).write_text(json.dumps(report, indent=1))
    summary.add("images", images)
    return summary.add("results", output / results_file)
