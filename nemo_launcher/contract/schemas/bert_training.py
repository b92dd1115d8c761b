"""Schema of the resolved `training` section of the BERT family (conf/_family/bert_training.yaml): megatron-core's
BertModel (masked LM, and with bert_binary_head a sentence-order head over the first token) on its masked
word-piece dataset.

    cfg = BertTrainingConfig.from_dict(section)    # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

The run, trainer, exp_manager and optimizer sections are every family's (common_training).
"""
import dataclasses
from typing import List, Literal, Optional, Tuple

from ..binding import config_fault, fraction, positive, positive_fields
from .common_training import (TrainingStage, ExpManagerSection, MaskedLmData, OptimSection, RunSection, TrainerSection, check_data_source,
                              check_heads, check_layout, check_recompute, check_schedule, data_reads)

STAGE = "training"


@dataclasses.dataclass(frozen=True)
class BertTokenizer:
    library: Literal["megatron"]  # WordPiece: megatron-core's BERT dataset needs [CLS], [SEP], [MASK] and [PAD]
    type: Literal["BertWordPieceLowerCase", "BertWordPieceCase"]
    vocab_file: str  # WordPiece vocab.txt, one piece per line
    model: Optional[str] = None  # must stay null (no SentencePiece for BERT)
    merge_file: Optional[str] = None  # WordPiece has no merges: must stay null

    def check(self, key: str) -> None:
        for name in ("model", "merge_file"):
            if getattr(self, name) is not None:
                raise config_fault(f"{key}.{name}", getattr(self, name), "a WordPiece tokenizer reads vocab_file only: set null")


@dataclasses.dataclass(frozen=True)
class BertData(MaskedLmData):
    """Masked tokens: 80% become [MASK], 10% a random piece, 10% stay; with the binary head each sample is two
    runs of sentences, swapped half of the time. Documents need two or more sentences (one sequence each in the
    .idx) to give such samples."""


@dataclasses.dataclass(frozen=True)
class BertModelSection:
    micro_batch_size: int  # samples per forward pass per data-parallel rank
    global_batch_size: int  # samples per optimizer step over all data-parallel ranks
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    tokenizer: BertTokenizer
    optim: OptimSection
    data: BertData
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None  # model chunks per pipeline stage (interleaved 1F1B)
    encoder_seq_length: int = 512  # tokens per sample
    max_position_embeddings: int = 512  # rows of the learned position table
    kv_channels: Optional[int] = None  # per-head size; null = hidden_size / num_attention_heads
    init_method_std: float = 0.02
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layernorm_epsilon: float = 1.0e-5
    activation: Literal["gelu", "geglu"] = "gelu"  # geglu gates the up-projection with a second one
    position_embedding_type: Literal["learned_absolute", "rope"] = "learned_absolute"
    bert_binary_head: bool = True  # sentence-order head (two token types); false: masked LM only
    share_embeddings_and_output_weights: bool = True  # the LM head's output layer reuses the token embeddings
    make_vocab_size_divisible_by: int = 128  # vocab padded to a multiple of this x TP
    seed: int = 1234
    use_cpu_initialization: bool = False  # init weights on the CPU: identical values for any TP size
    sequence_parallel: bool = False  # needs TP > 1 and Transformer Engine norms
    activations_checkpoint_granularity: Optional[Literal["selective", "full"]] = None
    activations_checkpoint_method: Optional[Literal["uniform", "block"]] = None  # full recompute only
    activations_checkpoint_num_layers: Optional[int] = None  # full recompute only
    transformer_engine: bool = True  # TE layer spec when transformer_engine is importable

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size", "global_batch_size", "num_layers", "hidden_size", "ffn_hidden_size",
                        "num_attention_heads", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                        "encoder_seq_length", "max_position_embeddings", "make_vocab_size_divisible_by")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)
        if self.data.seq_length != self.encoder_seq_length:
            raise config_fault(f"{key}.data.seq_length", self.data.seq_length,
                               f"must equal {key}.encoder_seq_length ({self.encoder_seq_length})")
        if self.position_embedding_type == "learned_absolute" and self.max_position_embeddings < self.encoder_seq_length:
            raise config_fault(f"{key}.max_position_embeddings", self.max_position_embeddings,
                               f"is below encoder_seq_length ({self.encoder_seq_length}): learned positions need one row per token")
        check_heads(self, key)
        vpp = self.virtual_pipeline_model_parallel_size
        if vpp is not None:
            positive(f"{key}.virtual_pipeline_model_parallel_size", vpp)
        pp = self.pipeline_model_parallel_size
        if self.num_layers % (pp * (vpp or 1)):
            raise config_fault(f"{key}.num_layers", self.num_layers,
                               f"must be divisible by PP({pp}) x virtual PP({vpp or 1}) = {pp * (vpp or 1)}; "
                               "change num_layers or the pipeline sizes")
        if (vpp or 1) > 1 and pp < 2:
            raise config_fault(f"{key}.virtual_pipeline_model_parallel_size", vpp, "needs pipeline_model_parallel_size > 1")
        check_recompute(self, key)


@dataclasses.dataclass(frozen=True)
class BertTrainingConfig(TrainingStage):
    run: RunSection
    trainer: TrainerSection
    exp_manager: ExpManagerSection
    model: BertModelSection

    def check(self, key: str) -> None:
        check_data_source(self.run, self.model.data, key)
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)
        check_schedule(self.model, self.trainer, key)

    def reads(self) -> List[Tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: the vocabulary and the data."""
        return [(f"{STAGE}.model.tokenizer.vocab_file", self.model.tokenizer.vocab_file)] + data_reads(self.run, self.model.data, STAGE)
