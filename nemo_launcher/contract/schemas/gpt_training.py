"""Schema of the resolved `training` section of the GPT family (conf/_family/gpt3_training.yaml).

    cfg = TrainingConfig.from_dict(section)        # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

Every key the family config holds is declared here with its unit; `bind` refuses any other key. The layout
rules (TP x PP dividing the GPUs, heads and layers divisible, the global batch splitting over data-parallel
ranks, ramp-up steps) are checked against trainer.num_nodes x trainer.devices at bind time, so the launcher
refuses what Megatron would refuse hours later in the queue.
"""
import dataclasses
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from ..binding import bind_stage, config_fault, fraction, non_negative, positive, positive_fields
from .common_training import (ExpManagerSection, OptimSection, RunSection, TrainerSection, blend, check_data_source,
                              check_heads, check_layout, check_recompute, check_splits, check_world_size, data_reads)

STAGE = "training"
Activation = Literal["gelu", "fast-swiglu", "squared-relu"]
Normalization = Literal["layernorm", "layernorm1p", "rmsnorm"]


@dataclasses.dataclass(frozen=True)
class TokenizerSection:
    library: Literal["megatron", "sentencepiece", "huggingface"]
    type: Optional[str] = None  # library megatron: GPT2BPETokenizer
    model: Optional[str] = None  # sentencepiece .model or huggingface tokenizer.json
    vocab_file: Optional[str] = None  # library megatron: GPT-2 vocab.json
    merge_file: Optional[str] = None  # library megatron: GPT-2 merges.txt

    def check(self, key: str) -> None:
        needed = {"megatron": ("vocab_file", "merge_file"), "sentencepiece": ("model",), "huggingface": ("model",)}[self.library]
        for name in needed:
            if not getattr(self, name):
                raise config_fault(f"{key}.{name}", getattr(self, name), f"tokenizer library {self.library} needs this file")


@dataclasses.dataclass(frozen=True)
class DataSection:
    seq_length: int  # tokens per sample; must equal model.encoder_seq_length
    splits_string: str = "99990,8,2"  # train,validation,test weights of each file's documents
    num_workers: int = 2  # DataLoader worker processes per rank
    dataloader_type: Literal["single", "cyclic"] = "single"  # single: dataset order; cyclic: reshuffled each pass
    reset_position_ids: bool = False  # positions restart after each end-of-document token
    reset_attention_mask: bool = False  # tokens attend only within their document (local layer spec only)
    eod_mask_loss: bool = False  # no loss on end-of-document tokens
    index_mapping_dir: Optional[str] = None  # megatron-core's index cache; null = beside each data file
    data_prefix: Optional[List[Union[float, str]]] = None  # [weight, prefix, ...]; null = automatic blend

    def check(self, key: str) -> None:
        positive(f"{key}.seq_length", self.seq_length)
        non_negative(f"{key}.num_workers", self.num_workers)
        check_splits(f"{key}.splits_string", self.splits_string)
        if self.data_prefix is not None:
            self.blend(key)

    def blend(self, key: str = "training.model.data") -> List[Union[float, str]]:
        return blend(self.data_prefix, f"{key}.data_prefix")


@dataclasses.dataclass(frozen=True)
class ModelSection:
    micro_batch_size: int  # samples per forward pass per data-parallel rank
    global_batch_size: int  # samples per optimizer step over all data-parallel ranks
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    tokenizer: TokenizerSection
    optim: OptimSection
    data: DataSection
    rampup_batch_size: Optional[List[int]] = None  # [start, increment, ramp-up samples]
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None  # model chunks per pipeline stage (interleaved 1F1B)
    encoder_seq_length: int = 2048  # tokens per sample
    max_position_embeddings: int = 2048  # rows of the learned position table
    num_query_groups: Optional[int] = None  # grouped-query attention; null = one group per head
    init_method_std: float = 0.02
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    kv_channels: Optional[int] = None  # per-head size; null = hidden_size / num_attention_heads
    normalization: Normalization = "layernorm"  # layernorm1p = LayerNorm with zero-centred gamma
    layernorm_epsilon: float = 1.0e-5
    make_vocab_size_divisible_by: int = 128  # vocab padded to a multiple of this x TP
    bias: bool = True  # bias terms in the linear layers
    activation: Activation = "gelu"
    position_embedding_type: Literal["learned_absolute", "rope"] = "learned_absolute"
    rotary_percentage: float = 1.0  # share of each head's channels rotated (rope only)
    share_embeddings_and_output_weights: bool = True
    seed: int = 1234
    use_cpu_initialization: bool = False  # init weights on the CPU: identical values for any TP size
    sequence_parallel: bool = False  # needs TP > 1 and Transformer Engine norms
    activations_checkpoint_granularity: Optional[Literal["selective", "full"]] = None
    activations_checkpoint_method: Optional[Literal["uniform", "block"]] = None  # full recompute only
    activations_checkpoint_num_layers: Optional[int] = None  # full recompute only
    overlap_p2p_comm: bool = False  # overlap pipeline sends with compute; interleaved schedule only
    transformer_engine: bool = True  # TE layer spec when transformer_engine is importable
    fp8: bool = False  # FP8 GEMMs through Transformer Engine (Hopper)
    fp8_e4m3: bool = False  # e4m3 for every FP8 tensor; takes precedence over fp8_hybrid
    fp8_hybrid: bool = True  # e4m3 forward, e5m2 gradients (the usual recipe)
    fp8_margin: int = 0
    fp8_interval: int = 1
    fp8_amax_history_len: int = 1024
    fp8_amax_compute_algo: Literal["max", "most_recent"] = "max"

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size", "global_batch_size", "num_layers", "hidden_size", "ffn_hidden_size",
                        "num_attention_heads", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                        "encoder_seq_length", "max_position_embeddings", "make_vocab_size_divisible_by",
                        "fp8_interval", "fp8_amax_history_len")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)
        if self.data.seq_length != self.encoder_seq_length:
            raise config_fault(f"{key}.data.seq_length", self.data.seq_length,
                               f"must equal {key}.encoder_seq_length ({self.encoder_seq_length})")
        if self.position_embedding_type == "learned_absolute" and self.max_position_embeddings < self.encoder_seq_length:
            raise config_fault(f"{key}.max_position_embeddings", self.max_position_embeddings,
                               f"is below encoder_seq_length ({self.encoder_seq_length}): learned positions need one row per token")
        if not 0.0 < self.rotary_percentage <= 1.0:
            raise config_fault(f"{key}.rotary_percentage", self.rotary_percentage, "must be in (0, 1]")
        check_heads(self, key)
        if self.num_query_groups is not None:
            positive(f"{key}.num_query_groups", self.num_query_groups)
            if self.num_attention_heads % self.num_query_groups:
                raise config_fault(f"{key}.num_query_groups", self.num_query_groups,
                                   f"must divide num_attention_heads ({self.num_attention_heads})")
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
        if self.overlap_p2p_comm and not (vpp or 1) > 1:
            raise config_fault(f"{key}.overlap_p2p_comm", True,
                               "only works with the interleaved schedule (virtual_pipeline_model_parallel_size > 1); set false")
        check_recompute(self, key)
        if self.fp8 and not (self.fp8_e4m3 or self.fp8_hybrid):
            raise config_fault(f"{key}.fp8", True, "needs a format: fp8_e4m3 (e4m3 everywhere) or fp8_hybrid (e4m3 forward, e5m2 gradients)")
        if self.rampup_batch_size is not None:
            ramp = self.rampup_batch_size
            if len(ramp) != 3 or any(v <= 0 for v in ramp):
                raise config_fault(f"{key}.rampup_batch_size", ramp, "use [start, increment, ramp-up samples], e.g. [256, 128, 50000000]")
            start, increment, _ = ramp
            if start > self.global_batch_size or (self.global_batch_size - start) % increment:
                raise config_fault(f"{key}.rampup_batch_size", ramp,
                                   f"global_batch_size({self.global_batch_size}) must be start({start}) + k x increment({increment})")

    def batch_sizes(self) -> List[int]:
        """Every global batch size the run uses: the ramp-up's steps, then global_batch_size."""
        if self.rampup_batch_size is None:
            return [self.global_batch_size]
        start, increment, _ = self.rampup_batch_size
        return list(range(start, self.global_batch_size + 1, increment))


def tokenizer_files(tokenizer: TokenizerSection, key: str) -> List[Tuple[str, str]]:
    names = ("vocab_file", "merge_file") if tokenizer.library == "megatron" else ("model",)
    return [(f"{key}.{name}", getattr(tokenizer, name)) for name in names if getattr(tokenizer, name)]


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    run: RunSection
    trainer: TrainerSection
    exp_manager: ExpManagerSection
    model: ModelSection

    def check(self, key: str) -> None:
        check_data_source(self.run, self.model.data, key)
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)

    def reads(self) -> List[Tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: tokenizer files and data."""
        return tokenizer_files(self.model.tokenizer, f"{STAGE}.model.tokenizer") + data_reads(self.run, self.model.data, STAGE)

    def writes(self) -> List[str]:
        return [self.exp_manager.explicit_log_dir]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "TrainingConfig":
        return bind_stage(cls, data, stage)

    def data_parallel_size(self, world_size: int) -> int:
        """Checks the layout against the processes actually started; returns DP."""
        check_world_size(self.trainer, world_size, STAGE)
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, STAGE)
