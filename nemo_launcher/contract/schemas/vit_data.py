"""Schema of the resolved `data_preparation` section of the ViT family (conf/data_preparation/vit/*.yaml): the
generated coloured shapes in ImageNet's class-folder layout, which the tiny ViT configs read.

    cfg = VitShapeFoldersConfig.from_dict(section)   # the launcher before submitting; the step when it starts
    cfg.steps()                                      # [StepPlan("shape_folders")]: nemo_launcher.jobs.vision.shape_folders

It writes <output_dir>/train/<class>/*.png and <output_dir>/val/<class>/*.png, the two folders a ViT config lists
in model.data.data_path; the classes are the generator's 12, which model.num_classes must equal.
"""
import dataclasses
from typing import Any, Dict, List, Tuple

from ..binding import bind_stage, config_fault, positive_fields
from .data_preparation import StepPlan
from .run import RunBase

STAGE = "data_preparation"


@dataclasses.dataclass(frozen=True, kw_only=True)
class VitDataRun(RunBase):
    pass


@dataclasses.dataclass(frozen=True)
class VitShapeFoldersConfig:
    run: VitDataRun
    output_dir: str  # holds train/ and val/, one sub-folder per class
    num_train: int  # training images, classes drawn at random
    num_val: int  # held-out images: later examples of the same generator
    image_size: int  # pixels per side of the stored PNGs; training crops and resizes them to model.img_h x img_w
    seed: int = 0

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_train", "num_val", "image_size")
        if self.image_size < 16:
            raise config_fault(f"{key}.image_size", self.image_size, "shapes need at least 16 x 16 pixels")

    def steps(self) -> List[StepPlan]:
        return [StepPlan("shape_folders")]

    def reads(self) -> List[Tuple[str, str]]:
        return []

    def writes(self) -> List[str]:
        return [self.output_dir]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "VitShapeFoldersConfig":
        return bind_stage(cls, data, stage)
