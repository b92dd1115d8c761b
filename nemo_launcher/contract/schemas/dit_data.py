"""Schema of the resolved `data_preparation` section of the DiT family (conf/data_preparation/dit/*.yaml): an
Energon dataset of generated coloured shapes in seed 002's DiT sample format.

    cfg = DitShapesDataConfig.from_dict(section)   # the launcher before submitting; the step when it starts
    cfg.steps()                                    # [StepPlan("shapes_data")]: nemo_launcher.jobs.dit.shapes_data

The shapes, captions and text embeddings must match what the DiT that reads them expects: its
model.data.latent_shape ([3, 1, image_size, image_size]), text_length and text_embedding_dim.
"""

import dataclasses

from ..binding import field_fault, positive_fields
from .data_preparation import OneStepDataStage
from .run import RunBase

STAGE = "data_preparation"


@dataclasses.dataclass(frozen=True)
class DitShapesDataConfig(OneStepDataStage):
    step = "shapes_data"
    run: RunBase
    output_dir: str  # the Energon dataset folder: shard_NNN.tar and .nv-meta/ (what model.data.path names)
    num_samples: int  # images, each one of the classes at random
    shard_size: int  # samples per WebDataset shard
    image_size: int  # pixels per side; the latents are the RGB image itself, [3, 1, image_size, image_size]
    text_length: int  # text-embedding rows per sample (one per caption word, zero rows after)
    text_embedding_dim: int  # width of a word's embedding
    seed: int = 0

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_samples", "shard_size", "image_size", "text_length", "text_embedding_dim")
        if self.image_size < 8:
            raise field_fault(self, key, "image_size", "shapes need at least 8 x 8 pixels")
