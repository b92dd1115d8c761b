"""Schema of the resolved `training` section of the T5 family, T5 and mT5 (conf/_family/t5_training.yaml,
conf/_family/mt5_training.yaml): megatron-core's T5Model on its span-corruption dataset.

    cfg = T5TrainingConfig.from_dict(section)      # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

The run, trainer, exp_manager and optimizer sections are every family's (common_training). What megatron-core
0.16's T5Model cannot build is refused here, naming the key: a pipeline split of the encoder and decoder,
position embeddings other than learned_absolute and relative, a mean span length (`mean_ngram_size`).
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, no_pipeline_parallel, positive, positive_fields
from .common_training import (
    LAYER_WIDTHS,
    MODEL_PARALLEL,
    BuildSettings,
    MaskedLmData,
    OptimSection,
    TextPretrainingConfig,
    check_heads,
    check_recompute,
    check_stack_sizes,
    data_reads,
)

STAGE = "training"
# gelu/relu: one up-projection; the *glu variants gate it with a second one (ffn_hidden_size each).
Seq2SeqActivation = Literal["gelu", "geglu", "swiglu", "reglu", "relu"]

# Why megatron-core cannot pipeline a T5 (what a message says, and what a later version must change).
NO_PIPELINE_SPLIT = (
    "megatron-core 0.16 cannot split a T5 over pipeline stages (its schedules send one activation "
    "tensor between stages, while a decoder stage needs the encoder's output too, and "
    "parallel_state has no pipeline_model_parallel_split_rank any more)"
)


def check_no_pipeline_split(model, key: str) -> None:
    """T5 models run with PP 1: the rule of training, conversion, fine-tuning and evaluation alike."""
    no_pipeline_parallel(model, key, f"{NO_PIPELINE_SPLIT}: set 1 and split the model with tensor_model_parallel_size")
    split = model.pipeline_model_parallel_split_rank
    if split not in (None, 0):
        raise config_fault(
            f"{key}.pipeline_model_parallel_split_rank",
            split,
            "with pipeline_model_parallel_size 1 the encoder and the decoder share the one stage: set 0",
        )


@dataclasses.dataclass(frozen=True)
class T5Tokenizer:
    library: Literal["megatron", "sentencepiece"]  # megatron: WordPiece vocab.txt (T5); sentencepiece: a .model (mT5)
    type: Literal["BertWordPieceCase", "BertWordPieceLowerCase"] | None = None  # library megatron only
    model: str | None = None  # library sentencepiece: the .model file
    vocab_file: str | None = None  # library megatron: WordPiece vocab.txt, one piece per line
    merge_file: str | None = None  # WordPiece has no merges: must stay null
    num_sentinel_tokens: int = 100  # <extra_id_0> ... appended to the vocabulary: one per masked span of a sample

    def check(self, key: str) -> None:
        positive(f"{key}.num_sentinel_tokens", self.num_sentinel_tokens)
        if self.merge_file is not None:
            raise field_fault(self, key, "merge_file", "WordPiece and SentencePiece have no merges file: set null")
        if self.library == "megatron":
            if self.type is None:
                raise config_fault(
                    f"{key}.type", None, "library megatron needs BertWordPieceCase (T5) or BertWordPieceLowerCase"
                )
            if not self.vocab_file:
                raise field_fault(self, key, "vocab_file", "library megatron needs the WordPiece vocab.txt")
            if self.model is not None:
                raise field_fault(
                    self, key, "model", "is for library sentencepiece; library megatron reads vocab_file: set null"
                )
        else:
            if not self.model:
                raise field_fault(self, key, "model", "library sentencepiece needs the .model file")
            for name in ("type", "vocab_file"):
                if getattr(self, name) is not None:
                    raise config_fault(
                        f"{key}.{name}",
                        getattr(self, name),
                        "is for library megatron (WordPiece); sentencepiece reads model: set null",
                    )

    def files(self, key: str) -> list[tuple[str, str]]:
        name = "vocab_file" if self.library == "megatron" else "model"
        return [(f"{key}.{name}", getattr(self, name))]


@dataclasses.dataclass(frozen=True)
class T5Data(MaskedLmData):
    """Span corruption: masked spans of the encoder input become sentinels; the decoder predicts
    `<sentinel> span <sentinel> span ... <eos>`."""

    seq_length_dec: int = 128  # decoder tokens per sample: bos + masked tokens + one sentinel per span
    max_ngram_size: int = 10
    geometric_dist: bool = True
    mean_ngram_size: int | None = None  # NeMo's; megatron-core has none: must stay null

    def check(self, key: str) -> None:
        super().check(key)
        positive(f"{key}.seq_length_dec", self.seq_length_dec)
        if self.mean_ngram_size is not None:
            raise field_fault(
                self,
                key,
                "mean_ngram_size",
                "megatron-core's T5 dataset has no mean span length (geometric_dist draws lengths with "
                "p = 0.2, mean 5 words, clipped at max_ngram_size): set null",
            )
        needed = self.most_masked_tokens() + 2
        if self.seq_length_dec < needed:
            raise field_fault(
                self,
                key,
                "seq_length_dec",
                f"a full sample masks up to masked_lm_prob({self.masked_lm_prob}) "
                f"x (seq_length({self.seq_length}) - 2) "
                f"= {self.most_masked_tokens()} tokens, and the decoder reads bos + those tokens + a sentinel "
                f"per span: at least {needed}; raise it or lower masked_lm_prob",
            )


@dataclasses.dataclass(frozen=True)
class T5ModelSection(BuildSettings):
    micro_batch_size: int  # samples per forward pass per data-parallel rank
    global_batch_size: int  # samples per optimizer step over all data-parallel ranks
    encoder_num_layers: int
    decoder_num_layers: int
    hidden_size: int  # one width for encoder and decoder (the decoder cross-attends to the encoder's output)
    ffn_hidden_size: int
    num_attention_heads: int
    tokenizer: T5Tokenizer
    optim: OptimSection
    data: T5Data
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1  # must be 1 (see NO_PIPELINE_SPLIT)
    pipeline_model_parallel_split_rank: int | None = 0  # first decoder stage of a pipeline; 0 with PP 1
    encoder_seq_length: int = 512  # encoder tokens per sample
    max_position_embeddings: int = 512  # rows of the learned position table, shared by encoder and decoder
    kv_channels: int | None = None  # per-head size; null = hidden_size / num_attention_heads
    init_method_std: float = 0.015
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    normalization: Literal["layernorm", "rmsnorm"] = "layernorm"
    layernorm_epsilon: float = 1.0e-5
    bias: bool = True  # bias terms in the linear layers
    activation: Seq2SeqActivation = "geglu"
    position_embedding_type: Literal["learned_absolute", "relative"] = "learned_absolute"
    relative_attention_num_buckets: int = 32  # relative only: distance buckets (half per direction in the encoder)
    relative_attention_max_distance: int = 128  # relative only: distances beyond this share the last bucket
    share_embeddings_and_output_weights: bool = True  # the decoder's output layer reuses the token embeddings
    make_vocab_size_divisible_by: int = 128  # vocab (with the sentinels) padded to a multiple of this x TP

    def check(self, key: str) -> None:
        check_stack_sizes(
            self,
            key,
            "micro_batch_size",
            "global_batch_size",
            "encoder_num_layers",
            "decoder_num_layers",
            *LAYER_WIDTHS,
            *MODEL_PARALLEL,
            "encoder_seq_length",
            "max_position_embeddings",
            "make_vocab_size_divisible_by",
        )
        check_no_pipeline_split(self, key)
        if self.data.seq_length != self.encoder_seq_length:
            raise config_fault(
                f"{key}.data.seq_length",
                self.data.seq_length,
                f"must equal {key}.encoder_seq_length ({self.encoder_seq_length})",
            )
        longest = max(self.encoder_seq_length, self.data.seq_length_dec)
        if self.position_embedding_type == "learned_absolute" and self.max_position_embeddings < longest:
            raise field_fault(
                self,
                key,
                "max_position_embeddings",
                f"is below the longest sequence ({longest}: encoder_seq_length {self.encoder_seq_length}, "
                f"data.seq_length_dec {self.data.seq_length_dec}): encoder and decoder share one learned "
                "position table with a row per token",
            )
        if self.position_embedding_type == "relative":
            positive_fields(self, key, "relative_attention_num_buckets", "relative_attention_max_distance")
        check_heads(self, key)
        check_recompute(self, key)
        most_spans = self.data.most_masked_tokens()
        if self.tokenizer.num_sentinel_tokens < most_spans:
            raise config_fault(
                f"{key}.tokenizer.num_sentinel_tokens",
                self.tokenizer.num_sentinel_tokens,
                f"a sample can mask up to {most_spans} one-token spans (masked_lm_prob x (data.seq_length - 2)), "
                f"each needing its own sentinel: set at least {most_spans}",
            )


@dataclasses.dataclass(frozen=True)
class T5TrainingConfig(TextPretrainingConfig):
    model: T5ModelSection

    def reads(self) -> list[tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: the tokenizer file and the data. mC4's preparation
        writes a folder of .bin/.idx pairs per language into run.preprocessed_dir, the Pile's the pairs themselves."""
        return self.model.tokenizer.files(f"{STAGE}.model.tokenizer") + data_reads(
            self.run, self.model.data, STAGE, blended="*"
        )
