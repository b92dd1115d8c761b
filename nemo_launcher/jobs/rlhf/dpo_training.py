"""What a DPO run gives the tuning wing (tuning/job.py), any family: its data (the reference job's copies of the pairs
files) and the Lightning module that reports every DPO figure at validation.

    data = PreferencePairs(cfg)             # cfg: a bound DpoConfig; refuses missing or stale reference copies
    job = <the family's tuning job>(cfg, "rlhf_dpo", cfg.model.restore_from_path, data, method)
    module = PreferenceModule(parts, job)   # the job's module()

The tuning wing's module keeps only the minimised loss of a validation; DPO's point is the held-out preference
accuracy, margin and implicit rewards beside it, so PreferenceModule keeps every reported figure (the validation
line and TensorBoard's val_<name>). The pairs are jobs/rlhf/pairs.py's, in the batches dpo.py splits.
"""

from functools import partial

from ...contract.schemas.rlhf_dpo import TRAIN_SPLIT, VALIDATION_SPLIT
from ..common.config import JobConfigError
from ..core.module import _mean_of
from ..tuning.base import TuningModule
from ..tuning.job import AllWeights
from .dpo_reference import LENGTH_KEY, ReferenceFiles
from .pairs import PairsDataset, RepeatedPairs, check_vocabulary, collate_pairs, read_pairs

REFERENCE_KEY = "rlhf_dpo.model.reference.output_dir"


class PreferencePairs:
    """The data side of a DPO run (the interface of tuning/answer_data.py's PromptAnswerData)."""

    def __init__(self, cfg):
        m = cfg.model
        self.data = m.data
        self.files = ReferenceFiles(
            m.reference.output_dir, m.reference_model(), m.data.max_seq_length, m.reference.micro_batch_size
        )
        self.max_seq_length = m.data.max_seq_length
        self.num_workers = m.data.num_workers
        self.vocab_size: int | None = None  # the model's, once check_tokenizer has seen its tokenizer

    def check_tokenizer(self, tokenizer) -> None:
        """The data's vocabulary must be the model's; called once the model's tokenizer is loaded."""
        for split in (TRAIN_SPLIT, VALIDATION_SPLIT):
            check_vocabulary(self.data.pairs(split), tokenizer.vocab_size, "rlhf_dpo.model.data.data_dir")
        self.vocab_size = tokenizer.vocab_size

    def records(self, split: str):
        """The reference job's copy of a split, refused when missing, stale or without the reference fields."""
        assert self.vocab_size is not None, "check_tokenizer comes first: ids are checked against the vocabulary"
        path = self.files.check_current(split, self.data.pairs(split), REFERENCE_KEY)
        pairs = read_pairs(path, self.vocab_size, self.max_seq_length, LENGTH_KEY)
        if pairs[0].ref_chosen is None:  # read_pairs holds a file to all lines or none
            raise JobConfigError(
                f"{path}: no ref_chosen and ref_rejected: not a file the DPO reference job wrote; run "
                "python3 -m nemo_launcher.jobs.gpt.rlhf_dpo_reference with this config first"
            )
        return pairs

    def collate(self, tokenizer):
        return partial(collate_pairs, pad_id=tokenizer.eod)

    def train_dataset(self, tokenizer, size: int, seed: int):
        return RepeatedPairs(self.records(TRAIN_SPLIT), size, seed)

    def validation_sets(self, tokenizer):
        return [(VALIDATION_SPLIT, PairsDataset(self.records(VALIDATION_SPLIT)))]

    def describe(self) -> str:
        return f"preference pairs {self.data.pairs(TRAIN_SPLIT)} with reference log-probs from {self.files.output_dir}"

    def validation_metrics(self, job, module) -> dict[str, float]:
        return {}  # every DPO figure is a reported loss (dpo.LOSS_NAMES), kept by PreferenceModule


class PreferenceModule(TuningModule):
    def on_validation_epoch_end(self) -> None:
        batches = [losses for file in self._file_losses for losses in file]
        # A collective: every rank calls it, those off the last stage with nothing to add.
        self.last_val_losses = self.parts.reduce_last_stage_means(_mean_of(batches))
        self.last_val_metrics = {}


class WholePolicy(AllWeights):
    """DPO of every weight: the tuned policy is a whole GPT .nemo (tuning/job.py's AllWeights, named for DPO)."""

    name = "DPO (all weights)"

    def write(self, module, job) -> dict[str, str]:
        return {"DPO policy": super().write(module, job)["fine-tuned model"]}
