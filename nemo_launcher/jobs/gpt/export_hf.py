"""The conversion_nemo2hf stage's program: nemo_to_hf.py's export of `model.nemo_file` into `model.output_dir`.

    python3 -u -m nemo_launcher.jobs.gpt.export_hf --config <job dir>/<run.name>_hydra.yaml

Exit codes: 0 written, 2 a configuration error or a model no Hugging Face class computes exactly (the keys in the
way are named), else a crash.
"""

import argparse
import sys
from pathlib import Path

PROG = "python3 -m nemo_launcher.jobs.gpt.export_hf"


def main(argv=None) -> int:
    import yaml

    from ...contract.schemas.hf_export_stage import NemoToHFConfig
    from ..common.config import JobConfigError
    from ..common.errors import JobError
    from ..common.quiet import start_job
    from ..common.report import print_error

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the resolved conversion_nemo2hf YAML")
    path = Path(parser.parse_args(argv).config)
    start_job(accelerators=False)
    try:
        if not path.is_file():
            raise JobConfigError(f"--config {path}: no such file")
        cfg = NemoToHFConfig.from_dict(yaml.safe_load(path.read_text()) or {})
        from .nemo_to_hf import export_nemo  # torch: once the config is bound

        architecture = export_nemo(cfg.model.nemo_file, cfg.model.output_dir, cfg.model.dtype)
    except (JobConfigError, JobError) as error:
        return print_error(error)
    print(f"Hugging Face {architecture}: {cfg.model.output_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
