"""Schema of the resolved `training` section of the BERT family (conf/_family/bert_training.yaml): megatron-core's
BertModel (masked LM, and with bert_binary_head a sentence-order head over the first token) on its masked
word-piece dataset.

    cfg = BertTrainingConfig.from_dict(section)    # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

The run, trainer, exp_manager and optimizer sections are every family's (common_training). With
model.data.dataloader_type LDDL the data is three folders of LDDL's length bins (contract/lddl.py), not a blend.
"""

import dataclasses
from typing import Any, Literal

from ..binding import config_fault
from ..lddl import LDDL, SHARD_GLOB, check_bins, lddl_folders
from .common_training import (
    DecoderStackSection,
    MaskedLmData,
    OptimSection,
    TextPretrainingConfig,
    TrainerSection,
    data_reads,
)

STAGE = "training"


@dataclasses.dataclass(frozen=True)
class BertTokenizer:
    library: Literal["megatron"]  # WordPiece: megatron-core's BERT dataset needs [CLS], [SEP], [MASK] and [PAD]
    type: Literal["BertWordPieceLowerCase", "BertWordPieceCase"]
    vocab_file: str  # WordPiece vocab.txt, one piece per line
    model: str | None = None  # must stay null (no SentencePiece for BERT)
    merge_file: str | None = None  # WordPiece has no merges: must stay null

    def check(self, key: str) -> None:
        for name in ("model", "merge_file"):
            if getattr(self, name) is not None:
                raise config_fault(
                    f"{key}.{name}", getattr(self, name), "a WordPiece tokenizer reads vocab_file only: set null"
                )


@dataclasses.dataclass(frozen=True)
class BertData(MaskedLmData):
    """Masked tokens: 80% become [MASK], 10% a random piece, 10% stay; with the binary head each sample is two
    runs of sentences, swapped half of the time. Documents need two or more sentences (one sequence each in the
    .idx) to give such samples.

    dataloader_type LDDL reads the sentence pairs LDDL's preprocessing binned by length instead: data_prefix is
    then [train folder, validation folder, test folder] and every micro-batch comes from one bin."""

    def check(self, key: str) -> None:
        if self.dataloader_type != LDDL:
            super().check(key)
            return
        lddl_folders(self.data_prefix, f"{key}.data_prefix")
        # The folders replace the blend: what MaskedLmData checks of a blend (weights, .bin/.idx names) is moot.
        super(BertData, dataclasses.replace(self, data_prefix=None, dataloader_type="single")).check(key)

    def lddl_folders(self, key: str = f"{STAGE}.model.data") -> tuple[str, str, str] | None:
        """(train, validation, test) LDDL folders; None when the data is an indexed-dataset blend."""
        return lddl_folders(self.data_prefix, f"{key}.data_prefix") if self.dataloader_type == LDDL else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertModelSection(DecoderStackSection):
    tokenizer: BertTokenizer
    optim: OptimSection
    data: BertData
    encoder_seq_length: int = 512  # tokens per sample
    max_position_embeddings: int = 512  # rows of the learned position table
    activation: Literal["gelu", "geglu"] = "gelu"  # geglu gates the up-projection with a second one
    bert_binary_head: bool = True  # sentence-order head (two token types); false: masked LM only

    def check(self, key: str) -> None:
        super().check(key)
        folders = self.data.lddl_folders(f"{key}.data")
        if folders is not None:
            check_bins(folders, self.max_position_embeddings, f"{key}.data.data_prefix")


@dataclasses.dataclass(frozen=True)
class BertTrainerSection(TrainerSection):
    # Only so the seed's LDDL snippet, which nests data_prefix and dataloader_type under trainer, gets told where
    # they live; any value is refused.
    data: dict[str, Any] | None = None

    def check(self, key: str) -> None:
        super().check(key)
        if self.data is not None:
            raise config_fault(
                f"{key}.data",
                self.data,
                "the seed's LDDL snippet puts data under trainer, but the data keys live in model.data: set "
                "training.model.data.data_prefix and training.model.data.dataloader_type instead",
            )


@dataclasses.dataclass(frozen=True)
class BertTrainingConfig(TextPretrainingConfig):
    trainer: BertTrainerSection
    model: BertModelSection

    def reads(self) -> list[tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: the vocabulary and the data."""
        vocab = [(f"{STAGE}.model.tokenizer.vocab_file", self.model.tokenizer.vocab_file)]
        folders = self.model.data.lddl_folders()
        if folders is not None:
            return vocab + [(f"{STAGE}.model.data.data_prefix", f"{folder}/{SHARD_GLOB}") for folder in folders]
        return vocab + data_reads(self.run, self.model.data, STAGE)
