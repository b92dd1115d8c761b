"""Export a T5/mT5 `.nemo` to a Triton model repository whose Python backend answers with greedy decoding.

    python3 -u -m nemo_launcher.jobs.t5.export --config <job dir>/<run.name>_hydra.yaml

The text families' export (serving/triton_export.py: config.pbtxt, 1/model.py, 1/model.nemo, swapped in when
complete), with the T5 rules for merging a TP-sharded archive and config.pbtxt naming T5's generator (serving.py),
so the same backend file and deployment/serve_pytriton.py answer with T5's decoding. Needs no GPU. Exit codes as
GPT's: 0, 2, 74, 75.
"""

import sys


def main(argv=None) -> int:
    from ...contract.schemas.t5_export import T5ExportConfig
    from ..serving.triton_export import run_export

    return run_export(
        argv,
        "python3 -m nemo_launcher.jobs.t5.export",
        T5ExportConfig,
        load=_load_t5_nemo,
        generator="nemo_launcher.jobs.t5.serving:T5Generator",
    )


def _load_t5_nemo(path):
    """Imported when the export runs, after the job's log filters are in place (T5's modules load megatron-core)."""
    from .standalone import load_t5_nemo

    return load_t5_nemo(path)


if __name__ == "__main__":
    sys.exit(main())
