"""megatron-core BertModel chunks from `model.*`.

    config = transformer_config(cfg.model, precision="bf16", on_gpu=True, use_te=True)
    chunk = bert_chunk(cfg.model, config, vocab_size=30592, use_te=True, stage=ChunkStage(None, True, True))

The layers are megatron-core's BERT layers: pre-LayerNorm (a norm before attention and before the MLP, one more
after the last layer), a padding mask instead of a causal one, learned absolute positions and token types (two
with the sentence-order head, none without). On a GPU with Transformer Engine the TE spec is used, elsewhere
megatron-core's local spec, which also runs on a CPU. The parallel state must already be initialised.
"""

import torch.nn.functional as F

from ...contract.schemas.bert_training import BertModelSection
from ..core.recipe import ChunkStage
from ..core.transformer import language_model_settings, shared_transformer_settings

SENTENCE_TYPES = 2  # token types with the binary head: the first segment and the second


def token_types(model: BertModelSection) -> int:
    """Rows of the token-type embedding: segments only mean something to the sentence-order head."""
    return SENTENCE_TYPES if model.bert_binary_head else 0


def transformer_config(model: BertModelSection, precision: str, on_gpu: bool, use_te: bool):
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        **shared_transformer_settings(model, precision, on_gpu, use_te),
        num_layers=model.num_layers,
        normalization="LayerNorm",
        add_bias_linear=True,  # BERT's linear layers all carry biases
        # GeGLU is megatron's gated linear unit with gelu: linear_fc1 holds the gate rows and the up rows.
        gated_linear_unit=model.activation == "geglu",
        activation_func=F.gelu,
        # megatron fuses bias + gelu (and bias + geglu) in CUDA kernels only.
        bias_activation_fusion=on_gpu,
        **_bin_lengths(model),
    )


def _bin_lengths(model: BertModelSection) -> dict:
    """LDDL micro-batches are as long as their bin, so pipeline stages must send each other the shapes first.
    megatron-core ties that switch to its all-to-all MoE dispatcher, which a dense BERT never runs."""
    if model.data.dataloader_type != "LDDL" or model.pipeline_model_parallel_size == 1:
        return {}
    return dict(variable_seq_lengths=True, moe_token_dispatcher_type="alltoall")


def layer_spec(use_te: bool):
    from megatron.core.models.bert import bert_layer_specs

    if use_te:
        return bert_layer_specs.get_bert_layer_with_transformer_engine_spec()
    return bert_layer_specs.bert_layer_local_spec


def bert_chunk(model: BertModelSection, config, vocab_size: int, use_te: bool, stage: ChunkStage):
    from megatron.core.models.bert.bert_model import BertModel

    return BertModel(
        config=config,
        num_tokentypes=token_types(model),
        transformer_layer_spec=layer_spec(use_te),
        vocab_size=vocab_size,
        **language_model_settings(model, stage),
        add_binary_head=model.bert_binary_head,
        vp_stage=stage.vp_stage,
    )
