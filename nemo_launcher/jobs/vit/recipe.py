"""ViT on the trainer core: cross-entropy over ImageNet's class folders, top-1 accuracy reported beside it.

    run_program(argv, prog, VitTrainingConfig, vit_recipe, build=build_vit_parts)

Training images are sample n of the run (vision/class_folders.py: its crop drawn from (seed, n)), read through
the core's step sampler, so a resumed run reads what an uninterrupted one would; validation scores the first
limit_val_batches global batches of the validation folder, centre-cropped, every time.
"""

import dataclasses
from pathlib import Path

from ...contract.schemas.vision_training import IMAGENET_MEAN, IMAGENET_STD
from ..common.config import JobConfigError
from ..core.module import TrainingModule
from ..core.recipe import Recipe, Sequences
from ..vision.class_folders import Augment, ClassFolderImages, ClassFolders
from ..vision.tower import tower_flops_per_image
from .model import transformer_config, vit_chunk

LOSS, ACCURACY = "classification loss", "top1 accuracy"


def vit_forward_step(data_iterator, model):
    batch = next(data_iterator)
    return model(batch["images"], batch["labels"]), _scores


def _scores(output):
    loss = output[:, 0].mean()
    # The schedule divides the returned loss by the number of microbatches in place; report copies.
    return loss, {LOSS: loss.detach().clone(), ACCURACY: output[:, 1].mean().detach()}


def _sequences(model) -> Sequences:
    return Sequences(model.seq_length())


def _flops_per_token(model, vocab_size: int) -> float:
    return tower_flops_per_image(model) / model.seq_length()


def _summary_items(cfg, outcome):
    m = cfg.model
    return [
        (
            "model",
            f"ViT {m.num_layers} layers, hidden {m.hidden_size}, {m.patches()} patches of {m.patch_dim} px "
            f"+ {m.class_token_length} class tokens, {m.num_classes} classes (chance top-1 "
            f"{100 / m.num_classes:.1f}%)",
        )
    ]


def vit_recipe(cfg) -> Recipe:
    return Recipe(
        megatron_modules=("megatron.core.models.vision.clip_vit_model", "megatron.core.models.vision.vit_layer_specs"),
        transformer_config=transformer_config,
        build_chunk=vit_chunk,
        build_datasets=None,
        forward_step=vit_forward_step,
        loss_names=(LOSS, ACCURACY),
        sequences=_sequences,
        flops_per_token=_flops_per_token,
        summary_items=_summary_items,
    )


def pixel_statistics(tower, mean, std):
    return tower.image_mean or mean, tower.image_std or std


def vit_datasets(cfg, sizes, model=None):
    """(train, validation, None) over model.data.data_path; `model`: the section the classifier is built from
    (fine-tuning's: the .nemo's architecture at the new resolution), by default the config's own."""
    m = model or cfg.model
    data = m.data
    folders = ClassFolders(data.data_path[0])
    if len(folders.classes) != m.num_classes:
        raise JobConfigError(
            f"model.num_classes: {m.num_classes}, but {folders.root} holds {len(folders.classes)} class "
            f"folders; set num_classes to {len(folders.classes)}"
        )
    mean, std = pixel_statistics(m, IMAGENET_MEAN, IMAGENET_STD)
    size = (m.img_h, m.img_w)
    train = ClassFolderImages(
        folders, sizes[0], size, mean, std, m.seed, Augment(tuple(data.random_crop_scale), data.random_flip)
    )
    valid = None
    if len(data.data_path) > 1 and cfg.trainer.limit_val_batches:
        held_out = ClassFolders(data.data_path[1], folders.classes)
        if len(held_out) < m.global_batch_size:
            raise JobConfigError(
                f"model.data.data_path: {held_out.root} holds {len(held_out)} images, fewer than one "
                f"global batch ({m.global_batch_size}); validation needs at least one"
            )
        valid = ClassFolderImages(held_out, len(held_out), size, mean, std, m.seed, None)
    return train, valid, None


def describe(cfg, train, valid) -> str:
    text = f"class folders {train.folders.root} ({len(train.folders)} images, {len(train.folders.classes)} classes)"
    if valid is not None:
        text += f", validation {valid.folders.root} ({len(valid.folders)} images)"
    return text


def build_vit_parts(recipe: Recipe, cfg, placement, on_gpu: bool, resume=None):
    """The core's parts around fresh ViT weights (or a checkpoint's, loaded later by the strategy)."""
    from ..core.datasets import dataset_sizes
    from ..core.parts import assemble_parts
    from ..core.transformer import build_chunks, transformer_engine_available

    use_te = cfg.model.transformer_engine and on_gpu and transformer_engine_available()
    config = recipe.transformer_config(cfg.model, cfg.trainer.precision_name(), on_gpu, use_te)
    chunks = build_chunks(recipe.build_chunk, cfg.model, config, 0, use_te)
    built = {}

    def datasets(batches):
        built["splits"] = vit_datasets(cfg, dataset_sizes(cfg, batches))
        return built["splits"]

    parts = assemble_parts(recipe, cfg, placement, on_gpu, use_te, None, 0, config, chunks, datasets)
    train, valid, _ = built["splits"]
    return dataclasses.replace(parts, data_description=describe(cfg, train, valid))


class VitModule(TrainingModule):
    """The core's module; a run that reaches max_steps writes its model as the seed's .nemo, with the class names."""

    def nemo_path(self) -> Path:
        from .vision_family import VISION_FAMILY

        return Path(self.parts.cfg.exp_manager.explicit_log_dir) / "checkpoints" / VISION_FAMILY.training_nemo

    def model_section(self):
        """The section the classifier was built from (what the .nemo's model_config.yaml holds)."""
        return self.parts.cfg.model

    def write_outputs(self):
        from ..vision.saved_models import save_from_training

        p = self.parts
        return {
            ".nemo": save_from_training(
                p,
                "vit",
                self.nemo_path(),
                class_names=p.train_dataset.folders.classes,
                model_section=self.model_section(),
            )
        }
