"""ViT fine-tuning on the trainer core: the classifier built from a pretrained `.nemo` at the fine-tuning resolution,
with the seed's linear head, trained like pretraining (same forward step and loss) by the fine-tuning optimizer.

    run_program(argv, prog, VitFinetuneConfig, finetune_recipe, build=build_finetune_parts,
                module_class=VitFinetuneModule)

What changes against the `.nemo`:
- the learned positions of the patch grid are resized bicubically to the new grid (img_h / patch_dim rows by
  img_w / patch_dim columns), the class tokens' rows kept as they are: the seed's "higher resolution with
  interpolated position embeddings";
- the head: a new one (zeros, as ViT fine-tuning starts its head, so the first steps move only towards the new
  classes) unless the .nemo's head has the same type and class count, which is then kept;
- dropout, batch sizes, TP (the .nemo's weights are cut for this rank), the optimizer and its schedule.
Everything else of the trainer core holds: exact resume after kill -9 from step-<N> checkpoints (the .nemo is read
again, then the checkpoint's weights replace it), signals, max_time, TensorBoard. At max_steps the fine-tuned model
is written to <explicit_log_dir>/checkpoints/<exp_manager.name>.nemo, the file evaluation=vit/imagenet_val reads.
"""

import dataclasses
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from ..common.config import JobConfigError, bind
from ..core.recipe import Recipe, Sequences
from ..vision.tower import tower_flops_per_image
from .recipe import VitModule, describe, vit_datasets, vit_recipe

log = logging.getLogger(__name__)
_HEAD = ("head_hidden.", "head_out.")


def pretrained_section(path: str):
    """The .nemo's bound ViT model section (JobConfigError for anything that is not a ViT .nemo)."""
    from ...contract.schemas.vit_training import VitModelSection
    from ..vision.saved_models import read_saved_config

    if not Path(path).is_file():
        raise JobConfigError(
            f"model.restore_from_path: {path} does not exist; a finished ViT training run writes "
            "<train dir>/results/checkpoints/nemo_vit_classification.nemo"
        )
    family, section, _ = read_saved_config(path)
    if family != "vit":
        raise JobConfigError(f"model.restore_from_path: {path} holds a {family} model; fine-tune a ViT .nemo")
    return bind(VitModelSection, section, "model")


def finetuned_section(cfg, pretrained=None):
    """The classifier this run trains: the .nemo's architecture with fine-tuning's resolution, head, dropout,
    batches, layout and data (its optimizer section stays the .nemo's: the run's own is cfg.model.optim)."""
    m = cfg.model
    pretrained = pretrained or pretrained_section(m.restore_from_path)
    if m.patch_dim != pretrained.patch_dim:
        raise JobConfigError(
            f"model.patch_dim: {m.patch_dim}, but {m.restore_from_path} was trained with patches of "
            f"{pretrained.patch_dim} px; set {pretrained.patch_dim}"
        )
    tp = m.tensor_model_parallel_size
    for name in ("num_attention_heads", "ffn_hidden_size"):
        if getattr(pretrained, name) % tp:
            raise JobConfigError(
                f"model.tensor_model_parallel_size: TP({tp}) must divide the .nemo's {name} "
                f"({getattr(pretrained, name)}); pick a TP that divides it"
            )
    keep = (
        "micro_batch_size",
        "global_batch_size",
        "data",
        "num_classes",
        "img_h",
        "img_w",
        "head_type",
        "hidden_dropout",
        "attention_dropout",
        "tensor_model_parallel_size",
        "seed",
        "use_cpu_initialization",
        "transformer_engine",
        "megatron_amp_O2",
        "activations_checkpoint_granularity",
        "activations_checkpoint_method",
        "activations_checkpoint_num_layers",
    )
    return dataclasses.replace(pretrained, **{name: getattr(m, name) for name in keep})


def finetune_recipe(cfg) -> Recipe:
    section = finetuned_section(cfg)

    def summary(cfg, outcome):
        return [
            (
                "model",
                f"ViT {section.num_layers} layers, hidden {section.hidden_size}, {section.patches()} patches "
                f"of {section.patch_dim} px at {section.img_h} x {section.img_w}, {section.head_type} head, "
                f"{section.num_classes} classes (chance top-1 {100 / section.num_classes:.1f}%)",
            ),
            ("started from", cfg.model.restore_from_path),
        ]

    return dataclasses.replace(
        vit_recipe(cfg),
        sequences=lambda model: Sequences(section.seq_length()),
        flops_per_token=lambda model, vocab: tower_flops_per_image(section) / section.seq_length(),
        summary_items=summary,
    )


def interpolate_positions(table: torch.Tensor, class_tokens: int, old_grid, new_grid) -> torch.Tensor:
    """Learned positions [class_tokens + gh x gw, hidden] resized to the new patch grid (bicubic, as torchvision's
    and timm's ViTs do); the class tokens' rows are not positions on the grid and stay as they are."""
    if tuple(old_grid) == tuple(new_grid):
        return table
    classes, grid = table[:class_tokens], table[class_tokens:]
    hidden = table.shape[1]
    image = grid.float().reshape(1, old_grid[0], old_grid[1], hidden).permute(0, 3, 1, 2)
    resized = F.interpolate(image, size=tuple(new_grid), mode="bicubic", align_corners=False)
    resized = resized.permute(0, 2, 3, 1).reshape(new_grid[0] * new_grid[1], hidden).to(table.dtype)
    return torch.cat([classes, resized])


def adapted_state(full, pretrained, section):
    """The .nemo's TP=1 state dict made to fit the fine-tuned classifier: positions resized, and its head dropped
    unless it fits (same type and classes). Returns (state, whether the head was kept)."""
    state = dict(full)
    key = "tower.position_embeddings.weight"
    old = (pretrained.img_h // pretrained.patch_dim, pretrained.img_w // pretrained.patch_dim)
    new = (section.img_h // section.patch_dim, section.img_w // section.patch_dim)
    state[key] = interpolate_positions(state[key], pretrained.class_token_length, old, new)
    keep_head = pretrained.head_type == section.head_type and pretrained.num_classes == section.num_classes
    if not keep_head:
        state = {name: value for name, value in state.items() if not name.startswith(_HEAD)}
    return state, keep_head


def _load_pretrained(chunk, cfg, pretrained, section, tp_rank: int) -> str:
    from ..core.nemo_archive import layout_of, load_nemo_shard
    from ..core.shards import merge_shards, split_state_dict
    from ..vision.saved_models import read_saved_config, vision_shard_layout

    path = cfg.model.restore_from_path
    _, config, _ = read_saved_config(path)
    tp_saved, _ = layout_of(config)
    shards = {(rank, 0): load_nemo_shard(path, rank, 0) for rank in range(tp_saved)}
    full = shards[(0, 0)] if tp_saved == 1 else merge_shards(shards, vision_shard_layout(config, tp_saved))
    state, kept = adapted_state(full, pretrained, section)
    tp = section.tensor_model_parallel_size
    mine = split_state_dict(state, vision_shard_layout(config, tp), tp_rank, 0)
    device = next(chunk.parameters()).device
    result = chunk.load_state_dict({k: v.to(device) for k, v in mine.items()}, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("._extra_state") and (kept or not k.startswith(_HEAD))]
    if missing or result.unexpected_keys:
        raise JobConfigError(
            f"model.restore_from_path: {path} does not fit the classifier (missing: {missing[:5]}, "
            f"unexpected: {result.unexpected_keys[:5]})"
        )
    if not kept:
        with torch.no_grad():
            chunk.head_out.weight.zero_()
            chunk.head_out.bias.zero_()
    return "kept" if kept else f"new {section.head_type} head of {section.num_classes} classes (zeros)"


def build_finetune_parts(recipe: Recipe, cfg, placement, on_gpu: bool, resume=None):
    """The core's parts around the pretrained weights (a resumed run loads them too, then the strategy puts the
    checkpoint's over every weight)."""
    from megatron.core import parallel_state

    from ..core.parts import assemble_parts
    from ..core.transformer import build_chunks, transformer_engine_available
    from .model import transformer_config, vit_chunk

    if cfg.trainer.accelerator == "cpu" and cfg.trainer.precision_name() != "fp32":
        raise JobConfigError(
            f"trainer.precision: {cfg.trainer.precision} needs accelerator gpu (megatron-core's "
            "mixed-precision optimizer only wraps CUDA tensors); use 32 on the CPU"
        )
    pretrained = pretrained_section(cfg.model.restore_from_path)
    section = finetuned_section(cfg, pretrained)
    use_te = section.transformer_engine and on_gpu and transformer_engine_available()
    config = transformer_config(section, cfg.trainer.precision_name(), on_gpu, use_te)
    (chunk,) = build_chunks(vit_chunk, section, config, 0, use_te)
    head = _load_pretrained(chunk, cfg, pretrained, section, parallel_state.get_tensor_model_parallel_rank())
    built = {}

    def datasets(batches):
        sizes = [
            batches.total_samples(cfg.trainer.max_steps),
            cfg.trainer.limit_val_batches * section.global_batch_size,
            0,
        ]
        built["splits"] = vit_datasets(cfg, sizes, model=section)
        return built["splits"]

    parts = assemble_parts(recipe, cfg, placement, on_gpu, use_te, None, 0, config, [chunk], datasets)
    train, valid, _ = built["splits"]
    grid = f"{pretrained.img_h // pretrained.patch_dim}x{pretrained.img_w // pretrained.patch_dim}"
    new_grid = f"{section.img_h // section.patch_dim}x{section.img_w // section.patch_dim}"
    description = (
        f"{describe(cfg, train, valid)}; from {cfg.model.restore_from_path}: positions {grid} -> {new_grid}, "
        f"head {head}"
    )
    parts = dataclasses.replace(parts, data_description=description)
    parts.finetuned_section = section
    return parts


class VitFinetuneModule(VitModule):
    """Writes the fine-tuned classifier to exp_manager's .nemo path, its section the fine-tuned architecture."""

    def nemo_path(self) -> Path:
        return Path(self.parts.cfg.exp_manager.nemo_path())

    def model_section(self):
        return self.parts.finetuned_section
