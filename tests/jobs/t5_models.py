"""Tiny T5 model sections and forward passes for the T5 conversion tests.

Two styles: `family` (the T5 family's defaults: learned positions, GeGLU, LayerNorm, biases, tied embeddings with
the output layer's vocabulary bias) and `hf` (what Hugging Face's T5 computes: relative positions, RMSNorm, no
biases, untied output layer). Vocabularies come from tests/jobs/data_support.py (trained here, no network).
"""

import copy

STYLES = ("family", "hf")


def model_section(style: str, tokenizer: dict, **overrides) -> dict:
    """A T5 `model:` section as the launcher writes it for training (every key the trainer's schema needs)."""
    section = {
        "micro_batch_size": 2,
        "global_batch_size": 4,
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "encoder_seq_length": 32,
        "max_position_embeddings": 32,
        "encoder_num_layers": 2,
        "decoder_num_layers": 2,
        "hidden_size": 64,
        "ffn_hidden_size": 128,
        "num_attention_heads": 4,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "use_cpu_initialization": True,
        "transformer_engine": False,
        "init_method_std": 0.2,  # large weights: logits far from uniform, so a wrong mapping cannot hide
        "tokenizer": dict(tokenizer),
        "optim": {"name": "adamw", "lr": 1.0e-3, "sched": {"name": "CosineAnnealing"}},
        "data": {"seq_length": 32, "seq_length_dec": 16, "num_workers": 0, "masked_lm_prob": 0.15},
    }
    if style == "hf":
        section.update(
            position_embedding_type="relative",
            normalization="rmsnorm",
            bias=False,
            share_embeddings_and_output_weights=False,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
        )
    elif style != "family":
        raise ValueError(style)
    section.update(copy.deepcopy(overrides))
    return section


def wordpiece_tokenizer(vocab_file: str) -> dict:
    return {
        "library": "megatron",
        "type": "BertWordPieceCase",
        "vocab_file": str(vocab_file),
        "num_sentinel_tokens": 10,
    }


def sentencepiece_tokenizer(model_file: str) -> dict:
    return {
        "library": "sentencepiece",
        "type": None,
        "model": str(model_file),
        "vocab_file": None,
        "num_sentinel_tokens": 10,
    }


def random_model(section: dict, vocab_size: int, seed: int = 7):
    """A randomly initialised TP=1 T5Model for `section` in eval mode (this process, TP=1)."""
    import torch

    from nemo_launcher.contract.schemas.t5_training import T5ModelSection
    from nemo_launcher.jobs.common.config import bind
    from nemo_launcher.jobs.t5.standalone import build_inference_model, inference_section, start_t5_model_parallel

    start_t5_model_parallel(1)
    torch.manual_seed(seed)
    model = build_inference_model(
        inference_section(bind(T5ModelSection, section, "model"), 1), vocab_size, "fp32", initialize=True
    )
    with torch.no_grad():  # norms start at exactly 1 and biases at 0: move them so a mapping mistake shows
        for name, param in model.named_parameters():
            if "layernorm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
    return model


def sample_batch(vocab_size: int, batch: int = 2, encoder: int = 12, decoder: int = 7, seed: int = 3):
    """(encoder ids, decoder ids, encoder padding mask) with the second sample's encoder input padded."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    encoder_ids = torch.randint(5, vocab_size, (batch, encoder), generator=generator)
    decoder_ids = torch.randint(5, vocab_size, (batch, decoder), generator=generator)
    encoder_mask = torch.ones(batch, encoder, dtype=torch.long)
    encoder_mask[-1, encoder - 3 :] = 0
    encoder_ids[-1, encoder - 3 :] = 0
    return encoder_ids, decoder_ids, encoder_mask


def megatron_logits(model, encoder_ids, decoder_ids, encoder_mask):
    """[batch, decoder tokens, vocab of this rank] logits of a T5Model (local spec), masks as the trainer makes them."""
    import torch

    from nemo_launcher.jobs.t5.recipe import attention_masks

    batch = {"enc_mask": encoder_mask, "dec_mask": torch.ones_like(decoder_ids)}
    with torch.no_grad():
        return model(encoder_ids, decoder_ids, *attention_masks(batch, transformer_engine=False)).float()
