"""Schema of the resolved `training` section of the BERT family (conf/_family/bert_training.yaml): megatron-core's
BertModel (masked LM, and with bert_binary_head a sentence-order head over the first token) on its masked
word-piece dataset.

    cfg = BertTrainingConfig.from_dict(section)    # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

The run, trainer, exp_manager and optimizer sections are every family's (common_training).
"""

import dataclasses
from typing import Literal

from ..binding import config_fault
from .common_training import (
    DecoderStackSection,
    MaskedLmData,
    OptimSection,
    TextPretrainingConfig,
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
    .idx) to give such samples."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertModelSection(DecoderStackSection):
    tokenizer: BertTokenizer
    optim: OptimSection
    data: BertData
    encoder_seq_length: int = 512  # tokens per sample
    max_position_embeddings: int = 512  # rows of the learned position table
    activation: Literal["gelu", "geglu"] = "gelu"  # geglu gates the up-projection with a second one
    bert_binary_head: bool = True  # sentence-order head (two token types); false: masked LM only


@dataclasses.dataclass(frozen=True)
class BertTrainingConfig(TextPretrainingConfig):
    model: BertModelSection

    def reads(self) -> list[tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: the vocabulary and the data."""
        return [(f"{STAGE}.model.tokenizer.vocab_file", self.model.tokenizer.vocab_file)] + data_reads(
            self.run, self.model.data, STAGE
        )
