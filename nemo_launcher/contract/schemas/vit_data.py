"""Schemas of the resolved `data_preparation` sections of the ViT family (conf/data_preparation/vit/*.yaml), one
per `dataset`:
- shape_folders: the generated coloured shapes in ImageNet's class-folder layout, which the tiny ViT configs read.
  It writes <output_dir>/train/<class>/*.png and <output_dir>/val/<class>/*.png, the two folders a ViT config
  lists in model.data.data_path; the classes are the generator's 12, which model.num_classes must equal.
- imagenet_shards: ImageNet (or any folder) in the class-folder layout packed into WebDataset shards, per split:
  <output_dir>/<split>/<n>.tar of examples_per_shard images (.jpg/.png as stored, .cls the class index, .txt the
  class folder name), classes.json and wdinfo.pkl beside them.

    cfg = VitDataPreparation.from_dict(section)  # the launcher before submitting; by `dataset`
    cfg.steps()                                  # [StepPlan("shape_folders")]: nemo_launcher.jobs.vision.shape_folders
"""

import dataclasses
from typing import Any, Literal

from ..binding import config_fault, field_fault, positive_fields
from .data_preparation import OneStepDataStage
from .run import RunBase

STAGE = "data_preparation"


@dataclasses.dataclass(frozen=True)
class VitShapeFoldersConfig(OneStepDataStage):
    step = "shape_folders"
    run: RunBase
    dataset: Literal["shape_folders"]
    output_dir: str  # holds train/ and val/, one sub-folder per class
    num_train: int  # training images, classes drawn at random
    num_val: int  # held-out images: later examples of the same generator
    image_size: int  # pixels per side of the stored PNGs; training crops and resizes them to model.img_h x img_w
    seed: int = 0

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_train", "num_val", "image_size")
        if self.image_size < 16:
            raise field_fault(self, key, "image_size", "shapes need at least 16 x 16 pixels")


@dataclasses.dataclass(frozen=True)
class ImagenetShardsConfig(OneStepDataStage):
    step = "imagenet_shards"
    run: RunBase
    dataset: Literal["imagenet_shards"]
    input_dir: str  # holds one class-folder tree per split (the seed's data/imagenet_1k: train/ and val/)
    output_dir: str  # <output_dir>/<split>/ gets the tars, classes.json and wdinfo.pkl
    splits: list[str] = dataclasses.field(default_factory=lambda: ["train", "val"])  # sub-folders of input_dir
    examples_per_shard: int = 1000  # images per tar (the last of a split may hold fewer)
    shuffle_seed: int | None = 0  # the order of a split's images across its tars; null: class folder order

    def check(self, key: str) -> None:
        positive_fields(self, key, "examples_per_shard")
        if not self.splits or len(set(self.splits)) != len(self.splits) or any("/" in s or not s for s in self.splits):
            raise field_fault(self, key, "splits", "list distinct sub-folder names of input_dir, e.g. [train, val]")

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.input_dir", f"{self.input_dir}/{split}") for split in self.splits]


_DATASETS = {"shape_folders": VitShapeFoldersConfig, "imagenet_shards": ImagenetShardsConfig}


class VitDataPreparation:
    """Binds a ViT data_preparation section to the schema its `dataset` names."""

    @staticmethod
    def from_dict(data: dict[str, Any], stage: str = STAGE):
        dataset = data.get("dataset")
        if dataset not in _DATASETS:
            raise config_fault(f"{stage}.dataset", dataset, f"choose one of {', '.join(_DATASETS)}")
        return _DATASETS[dataset].from_dict(data, stage)
