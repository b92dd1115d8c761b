"""The facts of a model that a downstream stage (conversion, tuning, evaluation, inference, export) will load.

    facts = facts_of_model(training_section["model"], "training stage of this pipeline")
    facts = facts_of_nemo("/results/gpt3_126m/convert_nemo/results/megatron_gpt.nemo")
    facts.stacks[0].heads, facts.positions, facts.image, facts.latent_factor

A `.nemo` is a tar whose model_config.yaml is the training `model:` section (jobs/core/nemo_archive.py), and a
training run's resolved config holds the same section, so one reader serves the training stage of a pipeline, the
config it follows and a file on disk, without torch. The section's layout says what kind of model it is (a
`vision` and a `text` tower, an encoder and a decoder, a UNet and a VAE), never a family's name.
contract/model_rules.py holds a stage's settings to these facts; the launcher calls it before submitting and a
job may call it with the facts of the file it opened.
"""

import dataclasses
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

NEMO_CONFIG_MEMBER = "model_config.yaml"  # jobs/core/nemo_archive.py's CONFIG_MEMBER: the archive's model section


class ModelFileError(ValueError):
    """A file named as a model that is not one this reader can open (not a tar, no model_config.yaml in it)."""


@dataclasses.dataclass(frozen=True)
class Stack:
    """One transformer stack: what TP (heads) and PP (layers) split, and what LoRA's layer numbers count."""

    name: str  # how a message names it: "" for a model of one stack, "encoder", "vision tower", ...
    layers: int
    heads: int

    def named(self) -> str:
        return f" in its {self.name}" if self.name else ""


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What a stage loading this model meets. None: the model has no such part (a GPT has no image size)."""

    source: str  # where the facts come from, as a message names it: "training stage of this pipeline", a path
    stacks: tuple[Stack, ...] = ()
    positions: int | None = None  # rows of its learned position table (None: rotary or relative, no table)
    image: tuple[int, int] | None = None  # (height, width) in pixels its position grid is sized for
    patch_dim: int | None = None  # pixels per patch side
    text_positions: int | None = None  # tokens its text tower takes (CLIP)
    latent_factor: int | None = None  # image pixels per latent pixel (its VAE's downsampling)
    tokenizer: Mapping[str, Any] | None = None  # the training section's tokenizer keys
    # The model section the facts were read from (a training `model:` section, a .nemo's model_config.yaml): the
    # performance model sizes a tuning job by it (launch/predictions.py).
    section: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    def describes_a_model(self) -> bool:
        """False for a file of the model's family that holds no architecture (a prompt, adapter or IA3 result file,
        whose model_config.yaml names its base model instead)."""
        return bool(self.stacks) or self.image is not None or self.latent_factor is not None

    def where(self) -> str:
        return f"the model ({self.source})"

    def replace(self, **changes) -> "ModelFacts":
        return dataclasses.replace(self, **changes)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _stack(name: str, section: Mapping[str, Any], layers_key: str = "num_layers") -> tuple[Stack, ...]:
    layers, heads = _int(section.get(layers_key)), _int(section.get("num_attention_heads"))
    return (Stack(name, layers, heads),) if layers and heads else ()


def _learned_positions(section: Mapping[str, Any]) -> int | None:
    # Rotary and relative embeddings have no table to run past; learned_absolute (the default) has one row a token.
    if section.get("position_embedding_type", "learned_absolute") != "learned_absolute":
        return None
    return _int(section.get("max_position_embeddings"))


def _image(section: Mapping[str, Any]) -> tuple[int, int] | None:
    height, width = _int(section.get("img_h")), _int(section.get("img_w"))
    return (height, width) if height and width else None


def facts_of_model(model: Mapping[str, Any], source: str) -> ModelFacts:
    """The facts of a training `model:` section (or a .nemo's model_config.yaml), read by its layout."""
    return _facts_by_layout(model, source).replace(section=model)


def _facts_by_layout(model: Mapping[str, Any], source: str) -> ModelFacts:
    tokenizer = model.get("tokenizer") if isinstance(model.get("tokenizer"), Mapping) else None
    vision, text = model.get("vision"), model.get("text")
    if isinstance(vision, Mapping) and isinstance(text, Mapping):  # two towers: CLIP
        return ModelFacts(
            source,
            stacks=_stack("vision tower", vision) + _stack("text tower", text),
            image=_image(vision),
            patch_dim=_int(vision.get("patch_dim")),
            text_positions=_int(text.get("max_position_embeddings")),
            tokenizer=tokenizer,
        )
    first_stage = model.get("first_stage_config")
    if isinstance(first_stage, Mapping):  # latent diffusion: the VAE halves the image between its levels
        levels = len((first_stage.get("ddconfig") or {}).get("ch_mult") or [1])
        return ModelFacts(source, latent_factor=2 ** (levels - 1), tokenizer=tokenizer)
    if "encoder_num_layers" in model:  # an encoder and a decoder: T5
        stacks = _stack("encoder", model, "encoder_num_layers") + _stack("decoder", model, "decoder_num_layers")
        return ModelFacts(source, stacks=stacks, positions=_learned_positions(model), tokenizer=tokenizer)
    return ModelFacts(
        source,
        stacks=_stack("", model),
        positions=_learned_positions(model),
        image=_image(model),
        patch_dim=_int(model.get("patch_dim")),
        tokenizer=tokenizer,
    )


def read_nemo_config(path: str | Path) -> dict[str, Any]:
    """model_config.yaml of a `.nemo` archive, read with the standard library and PyYAML only."""
    try:
        with tarfile.open(path) as archive:
            member = next((m for m in archive.getmembers() if m.name.lstrip("./") == NEMO_CONFIG_MEMBER), None)
            if member is None:
                raise ModelFileError(f"holds no {NEMO_CONFIG_MEMBER}; name a .nemo written by a training or conversion")
            config = yaml.safe_load(archive.extractfile(member))
    except (tarfile.TarError, OSError) as error:
        raise ModelFileError(f"is not a readable .nemo archive ({error}); name a .nemo a run wrote") from None
    if not isinstance(config, dict):
        raise ModelFileError(f"its {NEMO_CONFIG_MEMBER} is not a mapping of model keys")
    return config


def facts_of_nemo(path: str | Path) -> ModelFacts:
    return facts_of_model(read_nemo_config(path), str(path))


def facts_of_run_config(path: str | Path, source: str) -> ModelFacts:
    """The facts in a training run's resolved config (<results_dir>/<run.name>_hydra.yaml): its model section."""
    try:
        config = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ModelFileError(f"is not a readable training config ({error})") from None
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        raise ModelFileError("has no model section; name the training run's <run.name>_hydra.yaml")
    return facts_of_model(model, source)
