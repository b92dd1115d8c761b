"""What the ViT and CLIP training schemas share (vit_training, clip_training): the vision tower's keys and rules,
the mixed-precision switch of the reference, and how image folders and WebDataset shards are named.

    check_tower(section, "training.model")           # patches tile the image, heads divide the width
    check_amp_o2(model, trainer, "training.model")   # megatron_amp_O2 against trainer.precision

The tower is megatron-core's CLIPViTModel: a patch convolution, class tokens, learned positions, a pre-norm and
pre-norm transformer layers attending in both directions.
"""

import dataclasses

from ..binding import config_fault, field_fault, no_pipeline_parallel, positive_fields
from .common_training import LAYER_WIDTHS, check_heads, check_recompute, check_stack_sizes

# CLIP's pixel statistics (OpenAI's) and ImageNet's; null mean/std in a config pick the family's.
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".JPEG", ".JPG", ".PNG")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VisionTower:
    """The keys of a vision transformer over img_h x img_w RGB images cut into patch_dim x patch_dim patches."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    patch_dim: int = 16  # pixels per patch side
    img_h: int = 224  # input height in pixels (images are resized and cropped to it)
    img_w: int = 224
    num_channels: int = 3  # RGB only
    class_token_length: int = 8  # learned tokens before the patches; the first one is the image's summary
    kv_channels: int | None = None  # per-head size; null = hidden_size / num_attention_heads
    init_method_std: float = 0.02
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    layernorm_epsilon: float = 1.0e-5
    image_mean: list[float] | None = None  # per-channel mean subtracted from pixels in [0, 1]; null: the family's
    image_std: list[float] | None = None  # per-channel deviation the pixels are divided by; null: the family's

    def check(self, key: str) -> None:
        check_tower(self, key)

    def patches(self) -> int:
        return (self.img_h // self.patch_dim) * (self.img_w // self.patch_dim)

    def seq_length(self) -> int:
        """Tokens one image puts through the transformer."""
        return self.patches() + self.class_token_length


def check_patch_tiling(section, key: str) -> None:
    """The image sides (img_h, img_w) are whole multiples of patch_dim."""
    for side in ("img_h", "img_w"):
        if getattr(section, side) % section.patch_dim:
            raise field_fault(
                section,
                key,
                side,
                f"must be a multiple of patch_dim ({section.patch_dim}) so that patches tile the image",
            )


def check_tower(tower, key: str) -> None:
    check_stack_sizes(tower, key, "num_layers", *LAYER_WIDTHS, "patch_dim", "img_h", "img_w", "class_token_length")
    if tower.num_channels != 3:
        raise field_fault(tower, key, "num_channels", "images are read as RGB: set 3")
    check_patch_tiling(tower, key)
    for name in ("image_mean", "image_std"):
        values = getattr(tower, name)
        if values is not None and (len(values) != 3 or (name == "image_std" and min(values) <= 0)):
            raise config_fault(
                f"{key}.{name}",
                values,
                "expected three per-channel values (R, G, B)"
                + (", each > 0" if name == "image_std" else "")
                + ", or null for the family's",
            )
    check_heads(tower, key)


def check_amp_o2(model, trainer, key: str) -> None:
    """megatron_amp_O2 names the mixed precision this trainer runs in bf16/16: half-precision weights with fp32
    master copies in the optimizer (megatron-core's Float16Module). O1 (autocast over fp32 weights) is not built."""
    if trainer.precision_name() != "fp32" and not model.megatron_amp_O2:
        raise config_fault(
            f"{key}.megatron_amp_O2",
            False,
            f"trainer.precision={trainer.precision} trains with half-precision weights and fp32 master "
            "copies (O2) here; O1 autocast is not built: set true, or trainer.precision=32",
        )


def check_parallel(model, key: str) -> None:
    """TP splits heads and MLP widths; the seed's vision families have no pipeline or sequence parallelism."""
    positive_fields(
        model,
        key,
        "micro_batch_size",
        "global_batch_size",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
    )
    no_pipeline_parallel(
        model,
        key,
        "ViT and CLIP have no pipeline parallelism (the seed's feature matrix): set 1 and split the "
        "model with tensor_model_parallel_size",
    )
    check_recompute(model, key)
