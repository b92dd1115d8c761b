"""The CLIP export job: `python3 -m nemo_launcher.jobs.clip.export --config <resolved export yaml>`.

ONNX graphs checked under onnxruntime, TensorRT engines where TensorRT builds them, and Triton entries; see
nemo_launcher/jobs/vision/export.py.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.clip.export"


def main(argv=None) -> int:
    from ...contract.schemas.vision_export import ClipExportConfig
    from ..vision.export import run_vision_export

    return run_vision_export(argv, PROG, ClipExportConfig, "clip")


if __name__ == "__main__":
    sys.exit(main())
