"""Schema of `data_preparation=fid_evaluation/*`: COCO-2014 validation images and captions, in the layout the
Stable Diffusion FID/CLIP evaluation (sd_evaluation.py) reads.

    cfg = FidEvaluationDataConfig.from_dict(section)   # the launcher before submitting; every step when it starts
    cfg.steps()                                        # [generate_shapes] [-> standin_scorers] -> preprocess

Nothing downloads: the user puts COCO's `val2014/` images and `annotations/captions_val2014.json` (the
`{"images": [{"id", "file_name"}], "annotations": [{"id", "image_id", "caption"}]}` layout) where coco_images_dir
and coco_captions_file say. Steps, each a job running `nemo_launcher.jobs.fid_evaluation.<step>`:

| step            | when                         | writes                                                         |
|-----------------|------------------------------|----------------------------------------------------------------|
| generate_shapes | generate_shapes.enable       | a COCO-format set of coloured shapes where the COCO files go   |
| standin_scorers | standin_scorers.enable       | randomly initialised Inception and CLIP files (tiny configs)   |
| preprocess      | preprocess_images            | images_output_dir/<stem>.png (centre crop, image_size square)  |
| preprocess      | preprocess_captions          | captions_output_dir/<stem>_<annotation id>.txt                 |
"""

import dataclasses

from ..binding import StageSchema, config_fault, field_fault, positive_fields
from .data_preparation import StepPlan
from .run import RunBase

STAGE = "data_preparation"


@dataclasses.dataclass(frozen=True)
class CocoShapes:
    """A stand-in for COCO-2014 val written in its layout: one coloured shape per image, one caption naming it."""

    enable: bool = False
    num_images: int = 48
    image_size: int = 64  # pixels, square
    seed: int = 1  # another seed than the training corpus's, so the real set is not the training images

    def check(self, key: str) -> None:
        if self.enable:
            positive_fields(self, key, "num_images", "image_size")


@dataclasses.dataclass(frozen=True)
class StandinScorers:
    """Randomly initialised scoring networks in the real ones' file formats, for runs without the real weights.
    Scores computed with them are not comparable to published FID or CLIP scores."""

    enable: bool = False
    inception_weights_path: str | None = None  # torch-fidelity's Inception state dict format
    clip_model_path: str | None = None  # a transformers CLIPModel folder (model, tokenizer, image processor)
    seed: int = 0

    def check(self, key: str) -> None:
        if self.enable:
            for name in ("inception_weights_path", "clip_model_path"):
                if not getattr(self, name):
                    raise config_fault(f"{key}.{name}", getattr(self, name), "name where the stand-in is written")


@dataclasses.dataclass(frozen=True)
class CocoReferenceData:
    """The data keys without `run`: what evaluation=stable_diffusion/* embeds as `reference_data` to prepare its
    reference set itself, as the evaluation's first step (sd_evaluation.py)."""

    dataset_output_root: str  # where the preprocessed sets go (the evaluation's fid.coco_*_path point below it)
    coco_images_dir: str  # COCO's val2014/ folder of .jpg images (put there by hand)
    coco_captions_file: str  # COCO's captions_val2014.json (put there by hand)
    images_output_dir: str  # <stem>.png at image_size square: what fid.coco_images_path reads
    captions_output_dir: str  # one caption per .txt file: what fid.coco_captions_path reads
    preprocess_images: bool = True
    preprocess_captions: bool = True
    num_captions: int = 30000  # captions sampled at random (seeded) from all of the file's annotations
    image_size: int = 256  # FID is scored at 256 x 256 in the seed
    num_processes: int = 8  # image-resizing processes
    seed: int = 2014  # the caption sample
    generate_shapes: CocoShapes = CocoShapes()
    standin_scorers: StandinScorers = StandinScorers()

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_captions", "image_size", "num_processes")
        if not (
            self.preprocess_images
            or self.preprocess_captions
            or self.generate_shapes.enable
            or self.standin_scorers.enable
        ):
            raise field_fault(self, key, "preprocess_images", "every step is disabled; enable one")

    def steps(self) -> list[StepPlan]:
        plans = []
        if self.generate_shapes.enable:
            plans.append(StepPlan("generate_shapes"))
        if self.standin_scorers.enable:
            plans.append(StepPlan("standin_scorers"))
        if self.preprocess_images or self.preprocess_captions:
            plans.append(StepPlan("preprocess", tasks_per_node=1, cpus_per_task=self.num_processes))
        return plans

    def reads(self, key: str = STAGE) -> list[tuple[str, str]]:
        if self.generate_shapes.enable:
            return []
        paths = []
        if self.preprocess_images:
            paths.append((f"{key}.coco_images_dir", self.coco_images_dir))
        if self.preprocess_captions:
            paths.append((f"{key}.coco_captions_file", self.coco_captions_file))
        return paths

    def writes(self) -> list[str]:
        paths = [self.images_output_dir, self.captions_output_dir]
        if self.generate_shapes.enable:
            paths += [self.coco_images_dir, self.coco_captions_file]
        if self.standin_scorers.enable:
            paths += [self.standin_scorers.inception_weights_path, self.standin_scorers.clip_model_path]
        return paths


@dataclasses.dataclass(frozen=True)
class FidEvaluationDataConfig(CocoReferenceData, StageSchema, stage=STAGE):
    run: RunBase = dataclasses.field(kw_only=True)  # no run key of its own
