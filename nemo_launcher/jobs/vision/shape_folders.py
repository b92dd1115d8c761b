"""The generated coloured shapes (jobs/multimodal/shapes.py) in ImageNet's class-folder layout, for the tiny ViT
configs and the vision tests (no ImageNet here). As the ViT family's data preparation step (data_preparation=vit/*):

    python3 -u -m nemo_launcher.jobs.vision.shape_folders --config <job dir>/<run.name>_hydra.yaml

    write_shape_folders("/data/tiny_shapes_folders", train=480, val=120, size=64, seed=0)
    # /data/.../train/<class>/<n>.png and /data/.../val/<class>/<n>.png; class folders named "red_circle", ...

The folders are multimodal/shape_folders.py's: a rerun with the same settings leaves them as they are.
"""

import os

from ..multimodal.shape_folders import SETTINGS_FILE, SPLITS, ForeignFolders, write_shape_folders
from ..multimodal.shapes import CLASSES

PROG = "nemo_launcher.jobs.vision.shape_folders"


def main(argv=None):
    from ...contract.schemas.vit_data import VitShapeFoldersConfig
    from ..steps.config import DataConfigError, load_bound
    from ..steps.step_report import StepReport

    cfg = load_bound(VitShapeFoldersConfig, PROG, argv)
    report = StepReport("shape_folders", unit="dataset")
    try:
        written = write_shape_folders(cfg.output_dir, cfg.num_train, cfg.num_val, cfg.image_size, cfg.seed)
    except ForeignFolders as error:
        raise DataConfigError(
            f"data_preparation.output_dir={cfg.output_dir!r}: {error} exists and was not written by this step; "
            "name an empty or new folder"
        ) from None
    (report.done if written else report.kept)(cfg.output_dir, output=os.path.join(cfg.output_dir, SETTINGS_FILE))
    report.note(
        "images",
        f"{cfg.num_train} train, {cfg.num_val} val, {cfg.image_size} x {cfg.image_size} px, {len(CLASSES)} classes",
    )
    report.note("folders", ", ".join(os.path.join(cfg.output_dir, split) for split in SPLITS))
    return report


if __name__ == "__main__":
    from ..steps.config import run_step

    run_step(main)
