"""The `.nemo` of the vision families (ViT, CLIP): written when a training or fine-tuning run finishes and by the
conversion stage, read by evaluation, framework inference and export.

    save_vision_model(path, "vit", model_section_dict, state_dict, precision="fp32", class_names=[...])
    saved = load_vision_model("nemo_vit_classification.nemo")        # TP=1, eval mode, CPU or this rank's GPU
    pixels = saved.pixels(PIL_image)                                  # [3, H, W] as evaluation crops it
    saved.classify(batch)                   # ViT: logits [b, classes]; saved.class_names when known
    saved.image_features(batch), saved.text_features(["a red circle"]), saved.logit_scale()    # CLIP

The archive is core/nemo_archive.py's (model_config.yaml, model_weights.pt, tokenizer/<files>): model_config.yaml
holds the training `model:` section as bound, plus one `vision_saved_model:` entry with what is not part of it
(the family, the precision trained in, the class folder names of a ViT). Weights are the TP=1 state dict of the
family's chunk (jobs/vit/model.py VitClassifier, jobs/clip/model.py ClipModel) with megatron-core's local-spec
names; a run with TP > 1 gathers its shards first (full_state_dict), along the axis megatron's sharded state says.
CLIP's BPE files (vocab.json, merges.txt) are packed and read back from the archive.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..common.config import JobConfigError, bind
from ..multimodal.caption_tokenizer import load_clip_tokenizer
from .family import FAMILY_PACKAGES, VisionFamily, family_record

SAVED_KEY = "vision_saved_model"  # the model_config.yaml entry that is not the training model section


# ---- writing -----------------------------------------------------------------------------------------------------


def full_state_dict(chunk: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The chunk's TP=1 state dict on the host, on every tensor-parallel rank (a collective over the TP group).

    A tensor split over TP ranks is put back together along the axis its ShardedTensor is fragmented on; the vision
    towers have no gated MLP, so a plain concatenation restores every split weight (qkv rows are head-major)."""
    from megatron.core import parallel_state
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    state = {key: value for key, value in chunk.state_dict().items() if not key.endswith("._extra_state")}
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if tp == 1:
        return {key: value.detach().cpu() for key, value in state.items()}
    group = parallel_state.get_tensor_model_parallel_group()
    sharded = chunk.sharded_state_dict()
    full = {}
    for key, value in state.items():
        entry = sharded.get(key)
        axis = None
        if isinstance(entry, ShardedTensor):
            split = [i for i, parts in enumerate(entry.axis_fragmentations[entry.prepend_axis_num :]) if parts > 1]
            axis = split[0] if split else None
        if axis is None:
            full[key] = value.detach().cpu()
            continue
        pieces = [torch.empty_like(value) for _ in range(tp)]
        torch.distributed.all_gather(pieces, value.detach().contiguous(), group=group)
        full[key] = torch.cat(pieces, dim=axis).cpu()
    return full


def vision_shard_layout(model_config: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int = 1):
    """How a TP > 1 archive (the conversion's) splits: megatron-core's column- and row-parallel layers of the local
    spec, everything else replicated (core/shards.py). No pipeline stages, so no layer is renumbered."""
    from ..core.shards import ShardLayout, ShardRules

    rules = ShardRules(
        stack="(no pipeline stages)",
        column=(
            "linear_qkv.weight",
            "linear_qkv.bias",
            "linear_fc1.weight",
            "linear_fc1.bias",
            "word_embeddings.weight",
        ),
        row=("linear_proj.weight", "linear_fc2.weight"),
        replicated=(
            "class_token",
            "conv1.weight",
            "position_embeddings.weight",
            "layernorm.weight",
            "layernorm.bias",
            "ln_pre.weight",
            "ln_pre.bias",
            "linear_proj.bias",
            "linear_fc2.bias",
            "norm.weight",
            "norm.bias",
            "head_hidden.weight",
            "head_hidden.bias",
            "head_out.weight",
            "head_out.bias",
            "projection.weight",
            "logit_scale",
        ),
        last_stage=("",),
    )  # one stage holds every module
    return ShardLayout(rules, tensor_parallel, pipeline_parallel, num_layers=1, gated_mlp=False, tied_embeddings=False)


def saved_config(
    family: str, model_section: Mapping[str, Any], precision: str, class_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """model_config.yaml's content: the model section and the vision_saved_model entry."""
    if family not in FAMILY_PACKAGES:
        raise ValueError(f"family {family!r} is not one of {FAMILY_PACKAGES}")
    config = dict(model_section)
    config[SAVED_KEY] = {
        "family": family,
        "precision": precision,
        "class_names": list(class_names) if class_names is not None else None,
    }
    return config


def save_vision_model(
    path,
    family: str,
    model_section: Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    precision: str,
    class_names: Sequence[str] | None = None,
) -> Path:
    """Writes the archive (atomically: a later stage never sees half of it). `model_section`: the training config's
    `model:` mapping; for CLIP with library clip its tokenizer files are packed."""
    from ..core.nemo_archive import save_nemo

    return save_nemo(path, saved_config(family, model_section, precision, class_names), state_dict)


def save_from_training(
    parts,
    family: str,
    path,
    class_names: Sequence[str] | None = None,
    chunk: torch.nn.Module | None = None,
    model_section=None,
) -> str:
    """Every rank of a finished run: gathers the weights (of `chunk`, by default the run's own) and rank 0 writes
    the archive with `model_section` (by default the run's own). Room is checked first; a failed write is exit 74."""
    from ..common.storage import guarded_write, with_margin

    state = full_state_dict(chunk if chunk is not None else parts.bare_chunks[0])
    target = Path(path)
    if parts.placement.rank == 0:
        needed = with_margin(sum(t.numel() * t.element_size() for t in state.values()))
        advice = (
            f"Nothing was written to {target} (an earlier file there is unchanged). Free space there, or point "
            "exp_manager.explicit_log_dir (or base_results_dir) at a larger file system, then run the job again: "
            "it resumes from its last checkpoint and writes the model."
        )
        with guarded_write(target.parent, needed, f"the model {target.name}", advice):
            save_vision_model(
                target,
                family,
                model_section_dict(model_section or parts.cfg.model),
                state,
                parts.cfg.trainer.precision_name(),
                class_names,
            )
    if parts.placement.world_size > 1:
        torch.distributed.barrier()
    return str(target)


def model_section_dict(model) -> dict[str, Any]:
    """A bound model section back as the plain mapping model_config.yaml holds."""
    return _plain(dataclasses.asdict(model))


def _plain(value):
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


# ---- reading -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class SavedVisionModel:
    family: str  # the family's name (vision_family.py of its package): "vit", "clip"
    model_config: Any  # the bound model section (VitModelSection or ClipModelSection), TP=1
    module: torch.nn.Module  # VitClassifier or ClipModel, eval mode, TP=1
    precision: str  # dtype of the weights as loaded: fp32, bf16 or fp16
    trained_precision: str  # what the run trained in (the seed: evaluate CLIP in it)
    image_size: tuple[int, int]  # (height, width) in pixels
    mean: list[float]  # per-channel normalisation of pixels in [0, 1]
    std: list[float]
    class_names: list[str] | None = None  # ViT: the class folder names in label order, when the run knew them
    tokenizer: Any = None  # CLIP: encode(text, length) -> ids
    text_length: int | None = None  # CLIP: tokens per caption

    @property
    def record(self) -> VisionFamily:
        return family_record(self.family)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.module.parameters()).dtype

    def pixels(self, image) -> torch.Tensor:
        """An image (PIL image, path or encoded bytes) as evaluation reads it: resized, centre crop, normalised."""
        from .images import decode, evaluation_pixels

        if not hasattr(image, "convert"):
            image = decode(image)
        height, width = self.image_size
        return torch.from_numpy(evaluation_pixels(image.convert("RGB"), height, width, self.mean, self.std))

    def _images(self, images: torch.Tensor) -> torch.Tensor:
        return images.to(self.device, self.dtype)

    @torch.no_grad()
    def classify(self, images: torch.Tensor) -> torch.Tensor:
        """A classifier (ViT): logits [b, num_classes] (fp32) of pixel batches [b, 3, H, W]."""
        self._require(self.record.classifies, "classify", "image classifier")
        return self.module(self._images(images)).float()

    @torch.no_grad()
    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """An image-text model (CLIP): unit-length image embeddings [b, output_dim] (fp32)."""
        self._require(self.record.reads_text, "image_features", "image-text")
        return self.module.encode_image(self._images(images)).float()

    def tokens(self, texts: Sequence[str]) -> torch.Tensor:
        """An image-text model (CLIP): the token ids [b, text_length] the text tower reads."""
        self._require(self.record.reads_text, "tokens", "image-text")
        return torch.tensor([self.tokenizer.encode(text, self.text_length) for text in texts], device=self.device)

    @torch.no_grad()
    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """CLIP: unit-length caption embeddings [b, output_dim] (fp32)."""
        return self.module.encode_text(self.tokens(texts)).float()

    @torch.no_grad()
    def logit_scale(self) -> float:
        """CLIP: the learned temperature as a factor (exp of the clamped log-scale): logits = scale x cosine."""
        self._require(self.record.reads_text, "logit_scale", "image-text")
        return float(self.module.scale())

    def _require(self, able: bool, what: str, kind: str) -> None:
        if not able:
            raise JobConfigError(f"{what} is for {kind} models; this .nemo holds a {self.family} model")


def read_saved_config(path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(family, model section mapping, vision_saved_model entry); tokenizer files extracted to a temporary folder."""
    from ..core.nemo_archive import read_nemo_config

    config = read_nemo_config(path)
    saved = config.pop(SAVED_KEY, None)
    if not isinstance(saved, dict) or saved.get("family") not in FAMILY_PACKAGES:
        raise JobConfigError(
            f"{path}: not a ViT or CLIP .nemo (its model_config.yaml has no {SAVED_KEY}.family); "
            "use the .nemo a vision training, fine-tuning or conversion run wrote"
        )
    if not config.get("tokenizer"):
        config.pop("tokenizer", None)  # the archive writer adds an empty one for a model that reads no text (ViT)
    return saved["family"], config, saved


def inference_section(model, family: str | None = None):
    """The model section with what only changes training speed switched off, at TP=1 (any family's)."""
    changes = dict(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        activations_checkpoint_granularity=None,
        activations_checkpoint_method=None,
        activations_checkpoint_num_layers=None,
        transformer_engine=False,
        use_cpu_initialization=True,
    )
    return dataclasses.replace(model, **changes)


def start_vision_parallel(tensor_parallel: int = 1, seed: int = 1234):
    """The process group and megatron's parallel state (core/standalone.py), with the vision modules loaded first so
    that the CPU shim patches them too."""
    import megatron.core.models.gpt.gpt_layer_specs  # noqa: F401
    import megatron.core.models.vision.clip_vit_model  # noqa: F401
    import megatron.core.models.vision.vit_layer_specs  # noqa: F401

    from ..core.standalone import start_model_parallel

    return start_model_parallel(tensor_parallel, 1, seed)


def build_vision_model(
    family: str, model, precision: str, vocab_size: int = 0, tokenizer=None, initialize: bool = False
) -> torch.nn.Module:
    """This rank's chunk of the family's model (the parallel state must exist), in eval mode on this rank's device.
    initialize=False skips the random init: the caller loads every parameter."""
    from ..core.standalone import PRECISIONS, on_gpu
    from ..core.transformer import build_chunks

    if precision not in PRECISIONS:
        raise JobConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    gpu = on_gpu()
    config, build = family_record(family).chunk_builder(model, precision, gpu, initialize, tokenizer)
    if not initialize:
        config = dataclasses.replace(config, perform_initialization=False)
    (chunk,) = build_chunks(build, model, config, vocab_size, use_te=False)
    if gpu:
        chunk = chunk.cuda(torch.cuda.current_device())
    return chunk.eval()


def load_vision_model(path, precision: str | None = None) -> SavedVisionModel:
    """The archive's model at TP=1 in eval mode (one process is enough: the process group is started when none is).
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in."""
    from ..core.nemo_archive import layout_of, load_nemo_shard, load_weights
    from ..core.shards import merge_shards
    from ..core.standalone import precision_of

    family, section, saved = read_saved_config(path)
    record = family_record(family)
    model = inference_section(bind(record.model_schema(), section, "model"))
    tp, _ = layout_of(section)
    shards = {(rank, 0): load_nemo_shard(path, rank, 0) for rank in range(tp)}
    state = shards[(0, 0)] if tp == 1 else merge_shards(shards, vision_shard_layout(section, tp))
    start_vision_parallel(1, model.seed)
    precision = precision or precision_of(state)
    tokenizer, vocab = None, 0
    if record.reads_text:
        tokenizer = load_clip_tokenizer(model.tokenizer)
        vocab = int(state["embedding.word_embeddings.weight"].shape[0])
    module = build_vision_model(family, model, precision, vocab, tokenizer)
    load_weights(module, state, str(path))
    tower = record.image_tower(model)
    return SavedVisionModel(
        family=family,
        model_config=model,
        module=module,
        precision=precision,
        trained_precision=saved.get("precision") or precision,
        image_size=(tower.img_h, tower.img_w),
        mean=list(tower.image_mean or record.default_mean),
        std=list(tower.image_std or record.default_std),
        class_names=saved.get("class_names"),
        tokenizer=tokenizer,
        text_length=record.text_length(model),
    )
