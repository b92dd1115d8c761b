"""Two stand-in model families on the trainer core, shaped like the T5 and BERT recipes will be, for the core's tests.

    python -m tests.jobs.core.recipe_doubles encoder_decoder --config <GPT tiny training config>
    python -m tests.jobs.core.recipe_doubles two_losses --config ...

They read the GPT schema and GPT's sample data, so they need nothing the GPT tests do not already build, and
recast each GPT sample the way their family would see one:
- encoder_decoder: megatron-core's T5Model; the encoder reads the first model.encoder_seq_length tokens of a
  sample, the decoder predicts the next half as many (Sequences with a decoder length, encoder and decoder inputs
  and masks, both stacks counted in tokens/s).
- two_losses: megatron-core's BertModel with token types, a padding mask and the binary head; about one token in
  seven is masked, and half the samples have their halves swapped. The loss is masked-LM plus the binary
  (sentence-order) head, and the recipe reports the sum and both parts.
Neither is T5 or BERT training (no span corruption, no sentence boundaries): only the shapes the core must carry.
"""

import sys

from nemo_launcher.jobs.core.recipe import Recipe, Sequences

PROG = "python3 -m tests.jobs.core.recipe_doubles"
MASKED_EVERY = 7  # positions (i + sample) % 7 == 0 are masked in two_losses
PADDED = 2  # trailing positions of every two_losses sample that are padding


def _transformer_config(model, precision: str, on_gpu: bool, use_te: bool):
    from megatron.core.transformer import TransformerConfig

    from nemo_launcher.jobs.core.transformer import shared_transformer_settings

    return TransformerConfig(
        **shared_transformer_settings(model, precision, on_gpu, use_te), num_layers=model.num_layers
    )


def _decoder_length(model) -> int:
    return model.encoder_seq_length // 2


def _gpt_samples(cfg, tokenizer, sizes, blend, sequence_length: int):
    """GPT datasets over the blend, of `sequence_length` tokens per sample."""
    import dataclasses

    from nemo_launcher.jobs.gpt.data import build_gpt_datasets

    longer = dataclasses.replace(cfg.model, encoder_seq_length=sequence_length)
    return build_gpt_datasets(dataclasses.replace(cfg, model=longer), tokenizer, sizes, blend)


class _Recast:
    """A map-style dataset that recasts each sample of another with `recast(index, sample)`."""

    def __init__(self, base, recast):
        self.base, self.recast = base, recast

    def __len__(self):
        return len(self.base)

    def __getitem__(self, index):
        return self.recast(index, self.base[index])


def _recast_all(datasets, recast):
    return tuple(None if d is None else _Recast(d, recast) for d in datasets)


# ---- encoder_decoder ----------------------------------------------------------------------------------
def _encoder_decoder_chunk(model, config, vocab_size: int, use_te: bool, stage):
    from megatron.core.models.T5 import T5Model
    from megatron.core.models.T5.t5_spec import (
        get_t5_decoder_with_local_block_spec,
        get_t5_encoder_with_local_block_spec,
    )

    return T5Model(
        config=config,
        encoder_config=config,
        transformer_encoder_layer_spec=get_t5_encoder_with_local_block_spec(model.num_layers),
        transformer_decoder_layer_spec=get_t5_decoder_with_local_block_spec(model.num_layers),
        vocab_size=vocab_size,
        max_sequence_length=model.max_position_embeddings,
        pre_process=stage.pre_process,
        post_process=stage.post_process,
        share_embeddings_and_output_weights=True,
    )


def _encoder_decoder_datasets(cfg, tokenizer, sizes, blend):
    encoder, decoder = cfg.model.encoder_seq_length, _decoder_length(cfg.model)

    answer = slice(encoder - 1, encoder + decoder - 1)  # the decoder reads token t and predicts t + 1

    def recast(index, sample):
        return {
            "text_enc": sample["tokens"][:encoder],
            "text_dec": sample["tokens"][answer],
            "labels": sample["labels"][answer],
            "loss_mask": sample["loss_mask"][answer],
        }

    return _recast_all(_gpt_samples(cfg, tokenizer, sizes, blend, encoder + decoder), recast)


def _encoder_decoder_step(data_iterator, model):
    from functools import partial

    import torch

    from nemo_launcher.jobs.core.steps import masked_token_loss

    batch = next(data_iterator)
    encoder, decoder = batch["text_enc"], batch["text_dec"]
    b, se, sd = encoder.shape[0], encoder.shape[1], decoder.shape[1]
    # bool [b, 1, q, k], True = masked: the encoder and the cross attention see everything, the decoder the past.
    keep_all = torch.zeros(b, 1, se, se, dtype=torch.bool, device=encoder.device)
    causal = torch.triu(torch.ones(sd, sd, dtype=torch.bool, device=encoder.device), 1).expand(b, 1, sd, sd)
    cross = torch.zeros(b, 1, sd, se, dtype=torch.bool, device=encoder.device)
    output = model(encoder, decoder, keep_all, causal, cross, lm_labels=batch["labels"])
    return output, partial(masked_token_loss, batch["loss_mask"])


def encoder_decoder(cfg) -> Recipe:
    return Recipe(
        megatron_modules=("megatron.core.models.T5",),
        transformer_config=_transformer_config,
        build_chunk=_encoder_decoder_chunk,
        build_datasets=_encoder_decoder_datasets,
        forward_step=_encoder_decoder_step,
        sequences=lambda model: Sequences(model.encoder_seq_length, _decoder_length(model)),
        summary_items=lambda cfg, outcome: [("decoder", f"{_decoder_length(cfg.model)} tokens per sample")],
    )


# ---- two_losses ---------------------------------------------------------------------------------------
def _two_losses_chunk(model, config, vocab_size: int, use_te: bool, stage):
    from megatron.core.models.bert.bert_layer_specs import bert_layer_local_spec
    from megatron.core.models.bert.bert_model import BertModel

    return BertModel(
        config=config,
        num_tokentypes=2,
        transformer_layer_spec=bert_layer_local_spec,
        vocab_size=vocab_size,
        max_sequence_length=model.max_position_embeddings,
        pre_process=stage.pre_process,
        post_process=stage.post_process,
        add_binary_head=True,
        share_embeddings_and_output_weights=True,
        vp_stage=stage.vp_stage,
    )


def _two_losses_datasets(cfg, tokenizer, sizes, blend):
    import torch

    length = cfg.model.encoder_seq_length
    half = length // 2
    mask_id = tokenizer.eod

    def recast(index, sample):
        tokens = sample["tokens"]
        swapped = index % 2
        if swapped:
            tokens = torch.cat([tokens[half:], tokens[:half]])
        positions = torch.arange(length)
        masked = ((positions + index) % MASKED_EVERY == 0) & (positions < length - PADDED)
        padding = (positions < length - PADDED).long()
        return {
            "text": torch.where(masked, torch.full_like(tokens, mask_id), tokens),
            "types": (positions >= half).long(),
            "labels": tokens,
            "loss_mask": masked.float(),
            "padding_mask": padding,
            "is_random": torch.tensor(swapped),
        }

    return _recast_all(_gpt_samples(cfg, tokenizer, sizes, blend, length), recast)


def _two_losses(loss_mask, is_random, output):
    import torch.nn.functional as F

    from nemo_launcher.jobs.core.steps import masked_mean

    per_token, binary_logits = output
    lm = masked_mean(per_token, loss_mask)
    sop = F.cross_entropy(binary_logits.float(), is_random)
    loss = lm + sop
    return loss, {"loss": loss.detach().clone(), "lm loss": lm.detach().clone(), "sop loss": sop.detach().clone()}


def _two_losses_step(data_iterator, model):
    from functools import partial

    batch = next(data_iterator)
    output = model(batch["text"], batch["padding_mask"], tokentype_ids=batch["types"], lm_labels=batch["labels"])
    return output, partial(_two_losses, batch["loss_mask"], batch["is_random"])


def two_losses(cfg) -> Recipe:
    return Recipe(
        megatron_modules=("megatron.core.models.bert",),
        transformer_config=_transformer_config,
        build_chunk=_two_losses_chunk,
        build_datasets=_two_losses_datasets,
        forward_step=_two_losses_step,
        loss_names=("loss", "lm loss", "sop loss"),
    )


DOUBLES = {"encoder_decoder": encoder_decoder, "two_losses": two_losses}


def main(argv=None) -> int:
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
    from nemo_launcher.jobs.core.program import run_program

    name, *rest = sys.argv[1:] if argv is None else argv
    return run_program(rest, f"{PROG} {name}", TrainingConfig, DOUBLES[name])


if __name__ == "__main__":
    sys.exit(main())
