"""The ViT export job: `python3 -m nemo_launcher.jobs.vit.export --config <resolved export yaml>`.

ONNX graphs checked under onnxruntime, TensorRT engines where TensorRT builds them, and Triton entries; see
nemo_launcher/jobs/vision/export.py.
"""

import sys

from ...contract.schemas.vision_export import VitExportConfig
from ..vision.entry import vision_export_main

main = vision_export_main(__package__, VitExportConfig, "vit")


if __name__ == "__main__":
    sys.exit(main())
