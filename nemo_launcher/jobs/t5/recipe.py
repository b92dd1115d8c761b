"""T5 and mT5 on the trainer core: megatron-core's T5Model on its span-corruption dataset, masked LM loss on the
decoder's targets.

    from .recipe import T5          # what t5/train.py hands to core.program.run_program

Tokens per sample are the encoder's plus the decoder's (Sequences), so tokens/s and the summary count both
stacks. The core (nemo_launcher/jobs/core) does everything else; see core/recipe.py for what a recipe provides.
"""

from functools import partial

from ..core.recipe import Recipe, Sequences
from ..core.steps import masked_token_loss
from .data import build_t5_datasets
from .model import model_flops_per_token, t5_chunk, transformer_config


def attention_masks(batch, transformer_engine: bool):
    """(encoder, decoder, encoder-decoder) attention masks for T5Model from the samples' padding masks (1 = token);
    True hides a key. Padding keys are hidden from every query; the decoder's self-attention is causal by its
    layer spec (None here), which already hides the padding that follows a target. Transformer Engine's cross
    attention takes the query side's and the key side's padding as a pair; the local one a broadcast mask."""
    encoder_padding = (batch["enc_mask"] < 0.5)[:, None, None, :]  # [b, 1, 1, encoder tokens]
    if transformer_engine:
        decoder_padding = (batch["dec_mask"] < 0.5)[:, None, None, :]
        return encoder_padding, None, (decoder_padding, encoder_padding)
    return encoder_padding, None, encoder_padding


def t5_forward_step(data_iterator, model):
    """megatron-core's forward_step_func: one microbatch through the T5Model, per-token loss on the decoder."""
    from megatron.core.utils import get_attr_wrapped_model

    batch = next(data_iterator)
    masks = attention_masks(batch, get_attr_wrapped_model(model, "transformer_engine_masks"))
    output = model(batch["text_enc"], batch["text_dec"], *masks, lm_labels=batch["labels"])
    return output, partial(masked_token_loss, batch["loss_mask"])


def t5_sequences(model) -> Sequences:
    return Sequences(model.encoder_seq_length, model.data.seq_length_dec)


def _summary_items(cfg, outcome):
    m = cfg.model
    return [
        (
            "model",
            f"T5 {m.encoder_num_layers}+{m.decoder_num_layers} layers, hidden {m.hidden_size}, "
            f"{m.activation}, {m.position_embedding_type} positions; tokens count encoder "
            f"{m.encoder_seq_length} + decoder {m.data.seq_length_dec} per sample",
        )
    ]


T5 = Recipe(
    megatron_modules=("megatron.core.models.T5", "megatron.core.datasets.t5_dataset"),
    transformer_config=transformer_config,
    build_chunk=t5_chunk,
    build_datasets=build_t5_datasets,
    forward_step=t5_forward_step,
    sequences=t5_sequences,
    flops_per_token=model_flops_per_token,
    summary_items=_summary_items,
)
