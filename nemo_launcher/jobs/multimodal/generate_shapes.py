"""generate_shapes: write the synthetic coloured-shapes corpus as a parquet repository (tiny configs, quick starts).

    python3 -u -m nemo_launcher.jobs.multimodal.generate_shapes --config <job dir>/<run.name>_hydra.yaml

Writes <generate_shapes.output_dir>/data/*.parquet (URL = file:// image path, TEXT = caption, LABEL = class) and the
PNG images they point to; download_parquet then reads that folder as dataset_repo_url=file://<output_dir>. With
class_folders, also the same examples and num_held_out further ones as ImageNet-style class folders.
"""

import json
import os

from ..steps.config import run_step
from ..steps.step_report import StepReport
from .config import load_config
from .shapes import CLASSES, write_repository


def main(argv=None) -> StepReport:
    cfg = load_config("generate_shapes", argv)
    spec = cfg.generate_shapes
    report = StepReport("generate_shapes", unit="corpus")
    marker = os.path.join(spec.output_dir, "corpus.json")
    settings = {
        "num_examples": spec.num_examples,
        "num_parquet_files": spec.num_parquet_files,
        "image_size": spec.image_size,
        "seed": spec.seed,
        "classes": CLASSES,
    }
    if spec.class_folders:
        _class_folders(spec, report)
    if os.path.isfile(marker) and _read_json(marker) == settings:
        report.kept(spec.output_dir, output=marker)
        return report
    write_repository(spec.output_dir, spec.num_examples, spec.num_parquet_files, spec.image_size, spec.seed)
    with open(marker + ".tmp", "w") as handle:
        json.dump(settings, handle, indent=1)
    os.replace(marker + ".tmp", marker)
    report.done(spec.output_dir, output=marker)
    report.note("examples", f"{spec.num_examples} in {spec.num_parquet_files} parquet files, {len(CLASSES)} classes")
    return report


def _class_folders(spec, report) -> None:
    from ..steps.config import DataConfigError
    from .shape_folders import ForeignFolders, write_shape_folders

    try:
        write_shape_folders(spec.class_folders, spec.num_examples, spec.num_held_out, spec.image_size, spec.seed)
    except ForeignFolders as error:
        raise DataConfigError(
            f"data_preparation.generate_shapes.class_folders={spec.class_folders!r}: {error} exists "
            "and was not written by this step; name an empty or new folder"
        ) from None
    report.note(
        "class folders", f"{spec.class_folders}/{{train,val}} ({spec.num_examples} + {spec.num_held_out} held out)"
    )


def _read_json(path: str):
    with open(path) as handle:
        return json.load(handle)


if __name__ == "__main__":
    run_step(main)
