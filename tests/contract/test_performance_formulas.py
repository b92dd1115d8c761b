"""Each formula of the performance model pinned against hand-computed values: parameter counts against the sizes the
seed names (GPT, T5, mT5, BERT, ViT, CLIP, DiT, SD's UNet), memory terms against Megatron-LM's theoretical memory
and Korthikanti et al. 2022, FLOPs against Megatron-LM's num_floating_point_operations.

    python3 -m pytest tests/contract/test_performance_formulas.py

The expected values are closed forms written out here (the way the papers write them), not calls into the model.
"""

import pytest

from nemo_launcher.contract.performance import Layout
from nemo_launcher.contract.performance.flops import flops_per_token
from nemo_launcher.contract.performance.memory import (
    activation_bytes,
    layer_activation_bytes,
    stack_activation_bytes,
    weights_and_optimizer_bytes,
)
from nemo_launcher.contract.performance.parameters import parameters_on_busiest_device, total_parameters
from nemo_launcher.contract.performance.shapes import shape_of_model

GPT2_VOCAB = 50304  # 50257 padded to a multiple of 128


def gpt2_vocab(tp: int) -> int:
    """GPT-2's 50257 tokens padded to a multiple of 128 x TP, as Megatron pads them (each TP rank an equal slice)."""
    multiple = 128 * tp
    return -(-50257 // multiple) * multiple


def gpt(layers, hidden, heads, seq=2048, **extra):
    return {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "ffn_hidden_size": extra.pop("ffn_hidden_size", 4 * hidden),
        "encoder_seq_length": seq,
        "max_position_embeddings": seq,
        "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"},
        **extra,
    }


def t5(layers, hidden, ffn, heads, tokenizer):
    return {
        "encoder_num_layers": layers,
        "decoder_num_layers": layers,
        "hidden_size": hidden,
        "ffn_hidden_size": ffn,
        "num_attention_heads": heads,
        "kv_channels": 64,
        "activation": "geglu",
        "encoder_seq_length": 512,
        "max_position_embeddings": 512,
        "tokenizer": tokenizer,
        "data": {"seq_length_dec": 128},
    }


def bert(layers, hidden, heads):
    return {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "ffn_hidden_size": 4 * hidden,
        "activation": "gelu",
        "encoder_seq_length": 512,
        "max_position_embeddings": 512,
        "bert_binary_head": True,
        "tokenizer": {"library": "megatron", "type": "BertWordPieceLowerCase"},
    }


def gpt3_closed_form(layers, hidden, seq=2048, vocab=GPT2_VOCAB):
    """12 L h^2 + 13 L h per layer (QKV, projection, MLP, their biases, two LayerNorms), tied embeddings, learned
    positions, a final LayerNorm."""
    return 12 * layers * hidden**2 + 13 * layers * hidden + (vocab + seq) * hidden + 2 * hidden


def t5_closed_form(layers, hidden, ffn, query, vocab):
    attention = 4 * hidden * query + 3 * query + hidden  # Q, K, V in, output projection, biases
    geglu = 3 * hidden * ffn + 2 * ffn + hidden
    encoder = attention + geglu + 2 * 2 * hidden
    decoder = 2 * attention + geglu + 3 * 2 * hidden  # with cross-attention and its norm
    # tied token table, one learned position table (512), two final norms, the output layer's bias
    return layers * (encoder + decoder) + vocab * hidden + 512 * hidden + 2 * 2 * hidden + vocab


def bert_closed_form(layers, hidden, vocab):
    transformer = 12 * layers * hidden**2 + 13 * layers * hidden
    embeddings = vocab * hidden + 512 * hidden + 2 * hidden + 2 * hidden  # tokens, positions, types, norm
    lm_head = hidden * hidden + hidden + 2 * hidden + vocab
    binary_head = hidden * hidden + hidden + 2 * hidden + 2
    return transformer + embeddings + lm_head + binary_head


WORDPIECE_CASED_T5 = {"library": "megatron", "type": "BertWordPieceCase", "num_sentinel_tokens": 100}
MT5_SENTENCEPIECE = {
    "library": "sentencepiece",
    "model": "/data/mc4/bpe/mt5_tokenizer.model",
    "num_sentinel_tokens": 100,
}

# (name, model section, hand-computed count, the size the seed names it by)
SEED_SIZES = [
    ("gpt3/126m", gpt(12, 768, 12), gpt3_closed_form(12, 768), 126e6),
    ("gpt3/5b", gpt(24, 4096, 32), gpt3_closed_form(24, 4096), 5e9),
    ("gpt3/20b", gpt(44, 6144, 48), gpt3_closed_form(44, 6144), 20e9),
    ("gpt3/40b", gpt(48, 8192, 64), gpt3_closed_form(48, 8192), 40e9),
    ("gpt3/175b", gpt(96, 12288, 96), gpt3_closed_form(96, 12288), 175e9),
    # 28996 cased WordPiece tokens + 100 sentinels = 29096, padded to 29184
    ("t5/220m", t5(12, 768, 2048, 12, WORDPIECE_CASED_T5), t5_closed_form(12, 768, 2048, 768, 29184), 220e6),
    ("t5/3b", t5(24, 2048, 5120, 32, WORDPIECE_CASED_T5), t5_closed_form(24, 2048, 5120, 2048, 29184), 2.8e9),
    ("t5/11b", t5(24, 4096, 10240, 64, WORDPIECE_CASED_T5), t5_closed_form(24, 4096, 10240, 4096, 29184), 11e9),
    # The seed's tables give t5/23b 64 heads and t5/41b 36 layers, 21.2B and 30.9B weights; the reference's 23.07
    # files (80 heads; 48 layers) make the sizes their names and search configs (23.5b, 41.2b) say.
    ("t5/23b", t5(36, 5120, 10880, 80, WORDPIECE_CASED_T5), t5_closed_form(36, 5120, 10880, 5120, 29184), 23.5e9),
    ("t5/41b", t5(48, 6144, 10880, 96, WORDPIECE_CASED_T5), t5_closed_form(48, 6144, 10880, 6144, 29184), 41.2e9),
    # 250000 SentencePiece pieces + 100 sentinels = 250100, padded to 250112
    ("mt5/170m", t5(8, 512, 1024, 6, MT5_SENTENCEPIECE), t5_closed_form(8, 512, 1024, 384, 250112), 170e6),
    ("mt5/390m", t5(12, 768, 2048, 12, MT5_SENTENCEPIECE), t5_closed_form(12, 768, 2048, 768, 250112), 390e6),
    ("mt5/3b", t5(24, 2048, 5120, 32, MT5_SENTENCEPIECE), t5_closed_form(24, 2048, 5120, 2048, 250112), 3.2e9),
    # 30522 uncased WordPiece tokens padded to 30592
    ("bert/110m", bert(12, 768, 12), bert_closed_form(12, 768, 30592), 110e6),
    ("bert/4b", bert(48, 2560, 40), bert_closed_form(48, 2560, 30592), 3.9e9),
    ("bert/20b", bert(48, 6144, 96), bert_closed_form(48, 6144, 30592), 20e9),
    ("bert/100b", bert(96, 9216, 96), bert_closed_form(96, 9216, 30592), 100e9),
]


@pytest.mark.parametrize(("name", "model", "by_hand", "seed_size"), SEED_SIZES, ids=[row[0] for row in SEED_SIZES])
def test_parameter_counts_match_the_closed_forms_and_the_seed_sizes(name, model, by_hand, seed_size):
    assert total_parameters(shape_of_model(model)) == by_hand
    assert by_hand == pytest.approx(seed_size, rel=0.12)  # a size name is rounded: bert/20b has 22.0B


def test_vision_and_diffusion_counts_match_the_published_models():
    vit_b16 = {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "patch_dim": 16, "img_h": 224}
    vit_b16 |= {"img_w": 224, "class_token_length": 1, "num_classes": 1000}
    # timm's vit_base_patch16_224: patch embedding, class token, 197 positions, 12 blocks, final norm, 1000-way head
    assert total_parameters(shape_of_model(vit_b16)) == 86_567_656
    clip_b32 = {
        "output_dim": 512,
        "vision": {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "patch_dim": 32},
        "text": {"num_layers": 12, "hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 77},
        "tokenizer": {"library": "clip"},
    }
    clip_b32["vision"] |= {"img_h": 224, "img_w": 224, "class_token_length": 1}
    # OpenAI's ViT-B/32 CLIP: 151,277,313 weights; its vision tower has a norm before the stack as well (768 less)
    assert total_parameters(shape_of_model(clip_b32)) == 151_277_313 - 768
    dit_xl2 = {"num_layers": 28, "hidden_size": 1152, "num_attention_heads": 16, "patch_spatial": 2}
    dit_xl2 |= {"cross_attention": False, "data": {"seq_length": 256, "latent_shape": [4, 1, 32, 32]}}
    # Peebles & Xie's DiT-XL/2: 675M (with a class-label table this model's text conditioning replaces)
    assert total_parameters(shape_of_model(dit_xl2)) == pytest.approx(675e6, rel=0.01)
    unet = {
        "model_channels": 320,
        "channel_mult": [1, 2, 4, 4],
        "attention_resolutions": [4, 2, 1],
        "num_res_blocks": 2,
        "num_heads": 8,
        "transformer_depth": 1,
        "context_dim": 768,
        "image_size": 64,
        "in_channels": 4,
        "out_channels": 4,
    }
    # Stable Diffusion 1.x's UNet (diffusers UNet2DConditionModel of CompVis/stable-diffusion-v1-4)
    assert total_parameters(shape_of_model({"unet_config": unet})) == 859_520_964


def test_gqa_swiglu_untied_and_moe_counts():
    llama = gpt(32, 4096, 32, ffn_hidden_size=14336, num_query_groups=8, activation="fast-swiglu", bias=False)
    llama |= {
        "normalization": "rmsnorm",
        "position_embedding_type": "rope",
        "share_embeddings_and_output_weights": False,
    }
    llama |= {"vocab_size": 32000}
    h, kv = 4096, 1024
    layer = h * (h + 2 * kv) + h * h + 3 * h * 14336 + 2 * h  # GQA attention, SwiGLU, two RMSNorms
    by_hand = 32 * layer + 2 * 32000 * h + h  # untied input and output tables, the final RMSNorm
    assert total_parameters(shape_of_model(llama)) == by_hand  # Mistral 7B: 7,241,732,096
    assert by_hand == 7_241_732_096
    mixtral = llama | {"num_moe_experts": 8, "moe_router_topk": 2}
    experts = 8 * 3 * h * 14336 + h * 8  # eight SwiGLU experts and the router
    assert total_parameters(shape_of_model(mixtral)) == by_hand + 32 * (experts - 3 * h * 14336)
    assert total_parameters(shape_of_model(mixtral)) == 46_702_792_704  # Mixtral 8x7B


def megatron_activation_bytes(s, b, h, f, layers, vocab, t, p, vp, micro_batches):
    """Megatron-LM's compute_activation_memory (sequence parallel and selective recomputation), first stage."""
    memory = s * b * h * (18 + 4 * f / h) * layers
    memory += 8 * s * b * p + s * b * h * p
    if vp > 1:
        memory *= 1 + (p - 1) / (p * vp)
    elif p > 1:
        memory *= min(1, micro_batches / p)
    if p == 1:
        memory += s * b * h * 4 * (1 + vocab / h)
    return memory / t


@pytest.mark.parametrize(
    ("tp", "pp", "vp", "mbs", "gbs", "devices"),
    [(1, 1, 1, 4, 2048, 128), (8, 1, 1, 4, 2048, 512), (4, 8, 12, 1, 2048, 1024), (2, 4, 1, 1, 2, 8)],
)
def test_activations_with_sequence_parallel_and_selective_recompute_are_megatrons(tp, pp, vp, mbs, gbs, devices):
    model = gpt(96, 12288, 96)
    layout = Layout(tp=tp, pp=pp, vp=vp, mbs=mbs, gbs=gbs, nodes=devices // 8, sequence_parallel=True)
    layout = layout.replace(recompute="selective")
    vocab = gpt2_vocab(tp)
    expected = megatron_activation_bytes(2048, mbs, 12288, 4 * 12288, 96, vocab, tp, pp, vp, layout.micro_batches)
    assert activation_bytes(shape_of_model(model, tp), layout) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 8])
def test_a_layer_without_parallel_sequences_or_recomputation_is_korthikantis(tp):
    """Korthikanti et al. 2022, eq. 2 and section 4.2.2: s b h (10 + 24 / t + 5 a s / (h t)) bytes a layer with tensor
    parallelism only (and the attention scores stored: no fused attention kernel)."""
    (stack,) = shape_of_model(gpt(96, 12288, 96), tp).stacks
    s, b, h, a = 2048, 2, 12288, 96
    layout = Layout(tp=tp, mbs=b)
    expected = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert layer_activation_bytes(stack, layout, s, flash=False) == pytest.approx(expected, rel=1e-12)
    assert layer_activation_bytes(stack, layout, s, flash=True) == pytest.approx(s * b * h * (10 + 24 / tp), rel=1e-12)


def test_full_recomputation_keeps_each_layers_input_and_one_layer_at_a_time():
    (stack,) = shape_of_model(gpt(24, 4096, 32)).stacks
    s, b, h = 2048, 4, 4096
    uniform = Layout(tp=2, mbs=b, sequence_parallel=True, recompute="full", recompute_layers=1)
    one_layer = s * b * h * 34 / 2  # Korthikanti's 34 s b h, split over TP with sequence parallelism
    expected = 24 * 2 * s * b * h / 2 + one_layer  # 2 s b h kept per layer (section 4.3)
    assert stack_activation_bytes(stack, uniform, flash=True) == pytest.approx(expected, rel=1e-12)
    block = uniform.replace(recompute_method="block", recompute_layers=8)
    expected_block = 8 * 2 * s * b * h / 2 + 16 * one_layer + one_layer
    assert stack_activation_bytes(stack, block, flash=True) == pytest.approx(expected_block, rel=1e-12)


@pytest.mark.parametrize(
    ("tp", "pp", "distributed", "devices", "bytes_per_weight"),
    [(1, 1, False, 8, 18.0), (2, 4, True, 64, 6 + 12 / 8), (8, 16, True, 1024, 6 + 12 / 8), (1, 1, True, 1, 18.0)],
)
def test_weights_and_optimizer_follow_megatrons_bytes_per_weight(tp, pp, distributed, devices, bytes_per_weight):
    shape = shape_of_model(gpt(96, 12288, 96), tp)
    layout = Layout(tp=tp, pp=pp, distributed_optimizer=distributed, nodes=max(devices // 8, 1))
    layout = layout.replace(devices_per_node=min(devices, 8))
    # Megatron's most loaded shard: 1/pp of the layers and the embedding table over TP; the learned positions and
    # the final norm sit on the first stage too
    layers = 96 * (12 * 12288**2 + 13 * 12288)
    on_first_stage = (layers / pp + (gpt2_vocab(tp) + 2048) * 12288 + 2 * 12288) / tp
    dense, experts = parameters_on_busiest_device(shape, layout)
    assert dense == pytest.approx(on_first_stage, rel=1e-12) and experts == 0
    assert weights_and_optimizer_bytes(shape, layout) == pytest.approx(dense * bytes_per_weight, rel=1e-12)


def megatron_flops_per_token(layers, hidden, heads, groups, ffn, seq, vocab, topk=1, swiglu=False):
    """Megatron-LM's num_floating_point_operations over B s tokens: 12 L h^2 (1 + (f/h) k gamma + g/a + s/h +
    V / (2 L h)), with gamma = 3/2 for SwiGLU."""
    gamma = 1.5 if swiglu else 1.0
    return (
        12 * layers * hidden**2 * (1 + ffn / hidden * topk * gamma + groups / heads + seq / hidden) + 6 * hidden * vocab
    )


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (gpt(24, 4096, 32), megatron_flops_per_token(24, 4096, 32, 32, 16384, 2048, GPT2_VOCAB)),
        (gpt(96, 12288, 96), megatron_flops_per_token(96, 12288, 96, 96, 49152, 2048, GPT2_VOCAB)),
        (
            gpt(
                32,
                4096,
                32,
                4096,
                ffn_hidden_size=14336,
                num_query_groups=8,
                activation="fast-swiglu",
                vocab_size=128256,
            ),
            megatron_flops_per_token(32, 4096, 32, 8, 14336, 4096, 128256, swiglu=True),
        ),
        (
            gpt(32, 4096, 32, ffn_hidden_size=14336, num_query_groups=8, activation="fast-swiglu", vocab_size=32000)
            | {"num_moe_experts": 8, "moe_router_topk": 2},
            # plus the router's h x experts per token, which Megatron's formula leaves out
            megatron_flops_per_token(32, 4096, 32, 8, 14336, 2048, 32000, topk=2, swiglu=True) + 3 * 32 * 2 * 4096 * 8,
        ),
    ],
    ids=["gpt3-5b", "gpt3-175b", "llama3-8b", "mixtral-8x7b"],
)
def test_flops_per_token_are_megatrons(model, expected):
    assert flops_per_token(shape_of_model(model)) == pytest.approx(expected, rel=1e-12)
