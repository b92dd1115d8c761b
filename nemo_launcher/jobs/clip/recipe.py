"""CLIP on the trainer core: the contrastive loss over image-caption WebDataset shards, EMA weights in the module.

    run_program(argv, prog, ClipTrainingConfig, clip_recipe, build=build_clip_parts, module_class=ClipModule)

Each step is one microbatch per rank (no gradient accumulation: the loss compares every pair of the global batch,
which microbatches would split). Training example n of the run is vision/shards.py's sample n, cropped from
(seed, n), read through the core's step sampler, so a resumed run reads what an uninterrupted one would.
"""

import functools

import torch

from ...contract.schemas.vision_training import CLIP_MEAN, CLIP_STD
from ..core.recipe import Recipe, Sequences
from ..core.weight_average import AveragingModule
from ..vision.images import decode, evaluation_pixels, sample_rng, training_pixels
from ..vision.shards import IMAGE_MEMBERS, ShardExamples, list_shards
from ..vision.tower import tower_flops_per_image
from .loss import contrastive_loss
from .model import clip_chunk, text_config, vision_config

LOSS = "contrastive loss"
# OpenCLIP's training crop: most of the image, no flip (a caption may say "left" or hold text).
TRAINING_CROP = (0.9, 1.0)


def clip_forward_step(data_iterator, model, model_cfg):
    batch = next(data_iterator)
    return model(batch["images"], batch["tokens"]), functools.partial(_loss, model_cfg)


def _loss(model_cfg, output):
    from megatron.core import parallel_state

    image, text, scale = output
    loss = contrastive_loss(
        image,
        text,
        scale,
        model_cfg.local_loss,
        model_cfg.gather_with_grad,
        group=parallel_state.get_data_parallel_group(),
    )
    # The schedule divides the returned loss by the number of microbatches in place; report a copy.
    return loss, {LOSS: loss.detach().clone()}


def _sequences(model) -> Sequences:
    return Sequences(model.vision.seq_length() + model.text.encoder_seq_length)


def _flops_per_token(model, vocab_size: int) -> float:
    text = model.text
    tokens, hidden = text.encoder_seq_length, text.hidden_size
    text_flops = (
        3.0
        * text.num_layers
        * (2 * tokens * (4 * hidden * hidden + 2 * hidden * text.ffn_hidden_size) + 4 * tokens * tokens * hidden)
    )
    return (tower_flops_per_image(model.vision) + text_flops) / _sequences(model).tokens


def _summary_items(cfg, outcome):
    m = cfg.model
    v, t = m.vision, m.text
    ema = cfg.exp_manager.ema
    return [
        (
            "model",
            f"CLIP: vision {v.num_layers} layers x {v.hidden_size} ({v.patches()} patches of {v.patch_dim} px), "
            f"text {t.num_layers} layers x {t.hidden_size} ({t.encoder_seq_length} tokens), output {m.output_dim}",
        ),
        (
            "EMA",
            f"decay {ema.decay} every {ema.every_n_steps} steps (saved in every checkpoint)" if ema.enable else None,
        ),
    ]


def clip_recipe(cfg) -> Recipe:
    return Recipe(
        megatron_modules=(
            "megatron.core.models.vision.clip_vit_model",
            "megatron.core.models.vision.vit_layer_specs",
            "megatron.core.models.gpt.gpt_layer_specs",
            "megatron.core.models.common.embeddings.language_model_embedding",
            "megatron.core.transformer.transformer_block",
        ),
        transformer_config=vision_config,
        build_chunk=clip_chunk,
        build_datasets=None,
        forward_step=functools.partial(clip_forward_step, model_cfg=cfg.model),
        loss_names=(LOSS,),
        sequences=_sequences,
        flops_per_token=_flops_per_token,
        summary_items=_summary_items,
    )


class PairEncoder:
    """An example's members -> {"images": [3, H, W], "tokens": [encoder_seq_length]} (a class: DataLoader workers
    get it by pickling where they are spawned)."""

    def __init__(self, model, tokenizer, train: bool):
        vision = model.vision
        self.size = (vision.img_h, vision.img_w)
        self.mean, self.std = vision.image_mean or CLIP_MEAN, vision.image_std or CLIP_STD
        self.seed, self.length, self.tokenizer, self.train = model.seed, model.text.encoder_seq_length, tokenizer, train

    def __call__(self, members, sample: int):
        lowered = {key.lower(): value for key, value in members.items()}
        image = decode(next(lowered[k] for k in IMAGE_MEMBERS if k in lowered))
        height, width = self.size
        if self.train:
            pixels = training_pixels(
                image, height, width, sample_rng(self.seed, sample), TRAINING_CROP, False, self.mean, self.std
            )
        else:
            pixels = evaluation_pixels(image, height, width, self.mean, self.std)
        caption = lowered["txt"].decode("utf-8", "replace")
        return {"images": torch.from_numpy(pixels), "tokens": torch.tensor(self.tokenizer.encode(caption, self.length))}


def clip_datasets(cfg, tokenizer, sizes):
    from ..common.config import JobConfigError

    m, data = cfg.model, cfg.model.data
    train = ShardExamples(
        list_shards(data.train.dataset_path, "model.data.train.dataset_path"),
        sizes[0],
        m.seed,
        data.shuffle,
        PairEncoder(m, tokenizer, train=True),
    )
    valid = None
    if data.validation is not None and cfg.trainer.limit_val_batches:
        shards = list_shards(data.validation.dataset_path, "model.data.validation.dataset_path")
        total = sum(s.examples for s in shards)
        if total < m.global_batch_size:
            raise JobConfigError(
                f"model.data.validation.dataset_path: {total} examples, fewer than one global batch "
                f"({m.global_batch_size}); validation needs at least one"
            )
        valid = ShardExamples(shards, total, m.seed, False, PairEncoder(m, tokenizer, train=False))
    return train, valid, None


def describe(train, valid) -> str:
    text = f"WebDataset shards: {len(train.shards)} tars, {train.total} image-caption examples"
    if valid is not None:
        text += f"; validation {len(valid.shards)} tars, {valid.total} examples"
    return text


def build_clip_parts(recipe: Recipe, cfg, placement, on_gpu: bool, resume=None):
    """The core's parts around fresh CLIP weights (or a checkpoint's, loaded later by the strategy)."""
    import dataclasses

    from ..core.datasets import dataset_sizes
    from ..core.parts import assemble_parts
    from ..core.transformer import build_chunks, padded_vocab_size, transformer_engine_available
    from ..multimodal.caption_tokenizer import load_clip_tokenizer

    m = cfg.model
    use_te = m.transformer_engine and on_gpu and transformer_engine_available()
    precision = cfg.trainer.precision_name()
    tokenizer = load_clip_tokenizer(m.tokenizer)
    vocab = padded_vocab_size(tokenizer.vocab_size, m.make_vocab_size_divisible_by, m.tensor_model_parallel_size)
    config = recipe.transformer_config(m, precision, on_gpu, use_te)
    build = functools.partial(recipe.build_chunk, text_cfg=text_config(m, precision, on_gpu, use_te), eos=tokenizer.eos)
    chunks = build_chunks(build, m, config, vocab, use_te)
    built = {}

    def datasets(batches):
        built["splits"] = clip_datasets(cfg, tokenizer, dataset_sizes(cfg, batches))
        return built["splits"]

    parts = assemble_parts(recipe, cfg, placement, on_gpu, use_te, tokenizer, vocab, config, chunks, datasets)
    train, valid, _ = built["splits"]
    return dataclasses.replace(parts, data_description=describe(train, valid))


class ClipModule(AveragingModule):
    """The core's module with the EMA weights of exp_manager.ema (core/weight_average.py) and CLIP's .nemo at the
    end."""

    def write_outputs(self):
        """The seed's .nemo of a finished run; with EMA on it holds the average, the weights the run validated."""
        from pathlib import Path

        from ..vision.saved_models import save_from_training
        from .vision_family import VISION_FAMILY

        p = self.parts
        path = Path(p.cfg.exp_manager.explicit_log_dir) / "checkpoints" / VISION_FAMILY.training_nemo
        with self.averaged_weights():
            return {".nemo": save_from_training(p, "clip", path)}
