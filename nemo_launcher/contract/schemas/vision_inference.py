"""Schemas of what the vision families run with a saved model (`.nemo`) in one process: framework inference
(conf/fw_inference/vit/imagenet1k.yaml, conf/fw_inference/clip/clip_similarity.yaml) here, and the sections the
export schemas (vision_export) share with it.

    cfg = VitClassifyConfig.from_dict(section, "fw_inference")     # classify every image under data_path
    cfg = ClipSimilarityConfig.from_dict(section, "fw_inference")  # one image against a list of texts

Each job writes one JSON file into run.results_dir (PREDICTIONS_FILE, SIMILARITY_FILE) and prints a table.
"""

import dataclasses
from typing import Literal

from ..binding import field_fault, positive_fields
from .common_training import Precision, precision_name
from .run import OneProcess, RunBase, SavedModelStage

STAGE = "fw_inference"
PREDICTIONS_FILE = "predictions.json"
SIMILARITY_FILE = "similarity.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SavedModelRun(OneProcess, RunBase):
    one_process_fix = "a saved ViT or CLIP model runs in one process: set nodes and ntasks_per_node to 1"
    model_train_name: str | None = None  # the training run whose model is read (names the default paths)
    fine_tuning_dir: str | None = None  # ViT: the fine-tuning run whose .nemo is read by default
    nodes: int = 1
    ntasks_per_node: int = 1  # one process: a saved vision model runs unsplit (TP = 1)


@dataclasses.dataclass(frozen=True)
class SavedModelTrainer:
    """The seed's trainer keys of a one-device job."""

    devices: int = 1  # must be 1
    num_nodes: int = 1  # must be 1
    accelerator: Literal["gpu", "cpu"] = "gpu"
    # The dtype the model computes in: bf16, 16 or 32; null = the dtype its weights were saved in, which is the
    # precision it trained in (the seed: CLIP scored in another precision than it trained in gives wrong results).
    precision: Precision | None = None
    logger: bool = False  # accepted for the seed's configs; these jobs write no training logs

    def check(self, key: str) -> None:
        if (self.devices, self.num_nodes) != (1, 1):
            raise field_fault(self, key, "devices", "runs on one device: set devices and num_nodes to 1")

    def dtype(self) -> str | None:
        """fp32, bf16, fp16, or None for the saved weights' own."""
        return None if self.precision is None else precision_name(self.precision)


@dataclasses.dataclass(frozen=True)
class SavedModel:
    restore_from_path: str  # the .nemo a vision training, fine-tuning or conversion run wrote
    micro_batch_size: int = 64  # images (or texts) per forward pass

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size")
        if not self.restore_from_path.endswith(".nemo"):
            raise field_fault(
                self, key, "restore_from_path", "name the .nemo a vision training, fine-tuning or conversion run wrote"
            )


@dataclasses.dataclass(frozen=True)
class SavedModelJob(SavedModelStage, stage=STAGE):
    """The sections of a job that runs a saved vision model in one process and writes into run.results_dir."""

    run: SavedModelRun
    trainer: SavedModelTrainer
    model: SavedModel

    def writes(self) -> list[str]:
        return [self.run.results_dir]


@dataclasses.dataclass(frozen=True)
class VitClassifyConfig(SavedModelJob):
    """Every image file under data_path (sub-folders included) through the classifier: its top_k classes."""

    data_path: str  # a folder of images (ImageNet's class-folder layout works too) or one image file
    top_k: int = 5  # classes listed per image, most probable first

    def check(self, key: str) -> None:
        positive_fields(self, key, "top_k")

    def input_reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.data_path", self.data_path)]


@dataclasses.dataclass(frozen=True)
class ClipSimilarityConfig(SavedModelJob):
    """One image against each text: cosine similarity, the model's logit (temperature x cosine) and the softmax of
    the logits over the texts."""

    image_path: str  # the image file
    texts: list[str]  # captions to score the image against

    def check(self, key: str) -> None:
        if not self.texts or any(not isinstance(text, str) or not text.strip() for text in self.texts):
            raise field_fault(self, key, "texts", "give a list of one or more non-empty texts")

    def input_reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.image_path", self.image_path)]
