"""A training run sized in passes over its data (trainer.max_epochs) instead of optimizer steps (trainer.max_steps).

    check_run_length(trainer, "training.trainer")       # exactly one of the two keys sizes the run (both sides)
    sizing = EpochSizing(epochs=10, samples=1_000_000, global_batch_size=8192)
    sizing.max_steps                                     # 1220
    str(sizing)    # "max_epochs=10 over 1000000 samples at global batch 8192 = 1220 optimizer steps"

The trainer counts everything in optimizer steps (the learning-rate schedule, checkpoint and validation intervals,
the samples a resumed run skips), so a run sized in epochs gets its max_steps once the number of samples is known:
in the job, from the data set it opens; at launch, where the listing is already on disk (a WebDataset's
wdinfo.pkl). A step takes a whole global batch and the run is one stream of samples, pass after pass (sample n of
the run is example n mod N of pass n // N), so max_epochs x N samples make floor(max_epochs x N / global batch)
steps: every example is seen max_epochs times, less the samples of the last incomplete batch.
"""

import dataclasses
import os

from .binding import config_fault, positive
from .wdinfo import listed_tars

STEPS, EPOCHS = "max_steps", "max_epochs"


def check_run_length(trainer, key: str) -> None:
    """`trainer` (its full key `key`) sets exactly one of max_steps and max_epochs, and that one is positive."""
    steps, epochs = trainer.max_steps, trainer.max_epochs
    if steps is not None and epochs is not None:
        raise config_fault(
            f"{key}.{EPOCHS}",
            epochs,
            f"{key}.{STEPS}={steps} sizes the run too; set {key}.{STEPS}=null to train {epochs} epochs, "
            f"or {key}.{EPOCHS}=null to train {steps} steps",
        )
    if steps is None and epochs is None:
        raise config_fault(
            f"{key}.{STEPS}",
            None,
            f"neither {key}.{STEPS} nor {key}.{EPOCHS} sizes the run; set one of them "
            f"(optimizer steps, or passes over model.data.train)",
        )
    if steps is None:
        positive(f"{key}.{EPOCHS}", epochs)
    else:
        positive(f"{key}.{STEPS}", steps)


@dataclasses.dataclass(frozen=True)
class EpochSizing:
    """How many optimizer steps max_epochs passes over `samples` training samples make."""

    epochs: int  # trainer.max_epochs
    samples: int  # training samples in one pass over model.data.train
    global_batch_size: int  # samples per optimizer step

    @property
    def max_steps(self) -> int:
        return self.epochs * self.samples // self.global_batch_size

    def __str__(self) -> str:
        return (
            f"{EPOCHS}={self.epochs} over {self.samples} samples at global batch {self.global_batch_size} "
            f"= {self.max_steps} optimizer steps"
        )

    def check(self, data_key: str) -> None:
        """A run that would end before its first step is refused, naming the data (`data_key`) that is too small."""
        if self.max_steps < 1:
            raise config_fault(
                data_key,
                self.samples,
                f"{self} (fewer samples than one global batch); add data, raise trainer.{EPOCHS} "
                f"or lower model.global_batch_size",
            )


def sized_in_steps(cfg, samples: int):
    """(`cfg` with trainer.max_steps derived from max_epochs over `samples`, its EpochSizing). A frozen copy:
    everything downstream reads trainer.max_steps and never needs to know the run was sized in epochs."""
    sizing = EpochSizing(cfg.trainer.max_epochs, samples, cfg.model.global_batch_size)
    trainer = dataclasses.replace(cfg.trainer, max_steps=sizing.max_steps, max_epochs=None)
    return dataclasses.replace(cfg, trainer=trainer), sizing


def wdinfo_examples(path: str) -> int | None:
    """Examples a WebDataset listing (a wdinfo.pkl on disk) holds; None when `path` is no readable listing, so the
    count waits for the job (which reads tars and folders of tars too, and refuses a broken listing). Reading it
    costs one small file: the launcher counts a data set this way, never by opening its tars."""
    if not (path.endswith(".pkl") and os.path.isfile(path)):
        return None
    try:
        return sum(examples for _, examples in listed_tars(path))
    except ValueError:
        return None
