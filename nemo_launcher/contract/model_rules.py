"""Rules that hold a stage's settings to the model it will load (the facts of contract/model_facts.py).

    check_against_model(facts, "fine_tuning", resolved_section)     # JobConfigError `key=value: fix (the model...)`
    check_tokenizer(data_preparation_section, training_section["model"]["tokenizer"], "training", "the data ...")
    check_checkpoint_path("conversion.model.checkpoint_folder", path, training_log_dir, "the training stage ...")

A stage's schema checks its own section; only these rules see the model too, so a TP that does not divide the
heads, a sequence longer than the position table or an export sized for another image fails at launch instead of
after the queue wait. The keys are looked up by their place in a resolved section, the same place in every
family's configs; a section without a key is not asked about it.
"""

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from .binding import config_fault
from .model_facts import ModelFacts

# Token counts a stage feeds through the model's position table: prompt-learning's encoder_seq_length and the
# tuning datasets' longest examples (GPT's prompt and answer; T5's source and target).
SEQUENCE_KEYS = ("model.encoder_seq_length", "model.seq_length", "model.data.max_seq_length") + tuple(
    f"model.data.{split}.{name}"
    for split in ("train_ds", "validation_ds", "test_ds")
    for name in ("max_seq_length", "max_src_seq_length", "max_tgt_seq_length")
)
# data_preparation key -> training model.tokenizer key: the same tokenizer on both sides of a token file.
TOKENIZER_KEYS = {
    "tokenizer_library": "library",
    "tokenizer_type": "type",
    "vocab_file": "vocab_file",
    "merge_file": "merge_file",
    "tokenizer_model": "model",
}
_STEP_FOLDER = re.compile(r"step-(\d+)")


def value_at(section: Mapping[str, Any], dotted: str):
    """The value at a dotted key of a resolved section (`model.data.train_ds.max_seq_length`), or None."""
    value: Any = section
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _divisors(number: int) -> str:
    return ", ".join(str(d) for d in range(1, number + 1) if number % d == 0)


def _stack_sizes(facts: ModelFacts, attribute: str, noun: str) -> str:
    """'12 attention heads' for one stack, '12 attention heads in its encoder and 12 in its decoder' for several."""
    parts = [
        f"{getattr(stack, attribute)}{(' ' + noun) if i == 0 else ''}{stack.named()}"
        for i, stack in enumerate(facts.stacks)
    ]
    return " and ".join(parts)


def check_parallel_sizes(facts: ModelFacts, stage: str, section: Mapping[str, Any]) -> None:
    """TP splits every stack's heads and PP its layers: each must divide what it splits."""
    for name, attribute, noun, what in (
        ("tensor_model_parallel_size", "heads", "attention heads", "TP"),
        ("pipeline_model_parallel_size", "layers", "layers", "PP"),
    ):
        size = _count(value_at(section, f"model.{name}"))
        counts = [getattr(stack, attribute) for stack in facts.stacks]
        if size is None or not counts or all(count % size == 0 for count in counts):
            continue
        raise config_fault(
            f"{stage}.model.{name}",
            size,
            f"{facts.where()} has {_stack_sizes(facts, attribute, noun)}, which {what} must divide: "
            f"choose one of {_divisors(math.gcd(*counts))}",
        )


def check_sequence_lengths(facts: ModelFacts, stage: str, section: Mapping[str, Any]) -> None:
    """No sequence may run past a learned position table (rotary and relative embeddings have none)."""
    if facts.positions is None:
        return
    for key in SEQUENCE_KEYS:
        length = _count(value_at(section, key))
        if length is not None and length > facts.positions:
            raise config_fault(
                f"{stage}.{key}",
                length,
                f"{facts.where()} has {facts.positions} positions (max_position_embeddings): set at most "
                f"{facts.positions}",
            )


def check_lora_layers(facts: ModelFacts, stage: str, section: Mapping[str, Any]) -> None:
    """LoRA's layer numbers count each stack's layers from 1; a number past the deepest stack selects nothing."""
    selection = value_at(section, "model.peft.lora_tuning.layer_selection")
    if not isinstance(selection, Sequence) or not facts.stacks:
        return
    deepest = max(stack.layers for stack in facts.stacks)
    beyond = [layer for layer in selection if isinstance(layer, int) and layer > deepest]
    if beyond:
        raise config_fault(
            f"{stage}.model.peft.lora_tuning.layer_selection",
            list(selection),
            f"{facts.where()} has {_stack_sizes(facts, 'layers', 'layers')}: layer {beyond[0]} does not exist; "
            f"choose numbers from 1 to {deepest}, or null for every layer",
        )


def check_image_sizes(facts: ModelFacts, stage: str, section: Mapping[str, Any]) -> None:
    """Patches, image sides, text lengths and latent factors a stage sets must be the loaded model's own."""
    patch = _count(value_at(section, "model.patch_dim"))
    if patch is not None and facts.patch_dim is not None and patch != facts.patch_dim:
        raise config_fault(
            f"{stage}.model.patch_dim",
            patch,
            f"{facts.where()} cuts images into {facts.patch_dim} x {facts.patch_dim} patches (its patch embedding's "
            f"weights): set {facts.patch_dim}",
        )
    side = _count(value_at(section, "infer.max_dim"))
    if side is not None and facts.image is not None and not side == facts.image[0] == facts.image[1]:
        height, width = facts.image
        raise config_fault(
            f"{stage}.infer.max_dim",
            side,
            f"{facts.where()} takes {height} x {width} pixel images (its position table is fixed): set {height}"
            + ("" if height == width else " (a square side: export the model at a square size)"),
        )
    text = _count(value_at(section, "infer.max_text"))
    if text is not None and facts.text_positions is not None and text > facts.text_positions:
        raise config_fault(
            f"{stage}.infer.max_text",
            text,
            f"{facts.where()} has {facts.text_positions} text positions: set at most {facts.text_positions}",
        )
    factor = _count(value_at(section, "infer.down_factor"))
    if factor is not None and facts.latent_factor is not None and factor != facts.latent_factor:
        raise config_fault(
            f"{stage}.infer.down_factor",
            factor,
            f"{facts.where()} has a VAE that shrinks images {facts.latent_factor}-fold: set {facts.latent_factor}",
        )


# A conversion's replacement of a tokenizer file (model.<key>) -> the training tokenizer's key it replaces.
REPLACED_TOKENIZER_FILES = {"vocab_file": "vocab_file", "merge_file": "merge_file", "tokenizer_model": "model"}


def check_tokenizer_files(facts: ModelFacts, stage: str, section: Mapping[str, Any]) -> None:
    """A stage may replace a file the model's tokenizer reads (a vocabulary moved since training), not add one it
    never reads: a SentencePiece model given to a GPT-2 BPE tokenizer is packed into the .nemo and read by no one,
    or read instead of the vocabulary the embeddings were trained on."""
    if not isinstance(facts.tokenizer, Mapping):
        return
    reads = [key for key in REPLACED_TOKENIZER_FILES.values() if facts.tokenizer.get(key)]
    for name, replaced in REPLACED_TOKENIZER_FILES.items():
        value = value_at(section, f"model.{name}")
        if value is not None and replaced not in reads:
            library = facts.tokenizer.get("library")
            raise config_fault(
                f"{stage}.model.{name}",
                value,
                f"{facts.where()} tokenizes with library {library}, which reads {', '.join(reads) or 'no file'} and "
                f"no {replaced}: set null, or replace one of the files it reads",
            )


RULES = (check_parallel_sizes, check_sequence_lengths, check_lora_layers, check_image_sizes, check_tokenizer_files)


def check_against_model(facts: ModelFacts, stage: str, section: Mapping[str, Any]) -> None:
    """Every rule above, on a stage's resolved section; the first broken one raises JobConfigError."""
    for rule in RULES:
        rule(facts, stage, section)


def check_tokenizer(data_section: Mapping[str, Any], tokenizer: Mapping[str, Any], stage: str, source: str) -> None:
    """Token ids mean something only under the tokenizer that wrote them: a training reading a data preparation's
    output must tokenize as that preparation did. `tokenizer` is the training's model.tokenizer; `stage` names the
    training section in messages and `source` the data preparation."""
    for data_key, model_key in TOKENIZER_KEYS.items():
        wrote, reads = data_section.get(data_key), tokenizer.get(model_key)
        if wrote is None or reads is None or wrote == reads:
            continue
        raise config_fault(
            f"{stage}.model.tokenizer.{model_key}",
            reads,
            f"the data it reads ({source}) is tokenized with {data_key}={wrote!r}; use the same, or prepare the "
            "data again with this tokenizer",
        )


def check_checkpoint_path(key: str, path: str, log_dir: str, source: str, nemo_name: str | None = None) -> None:
    """A path a stage reads inside a training run's explicit_log_dir must be something that run writes there: its
    checkpoints/ folder, a step-<N> folder in it, or (families that save one when they finish) its .nemo."""
    checkpoints = PurePosixPath(log_dir) / "checkpoints"
    target = PurePosixPath(path)
    if target == checkpoints or (target.parent == checkpoints and _STEP_FOLDER.fullmatch(target.name)):
        return
    if nemo_name is not None and target == checkpoints / nemo_name:
        return
    written = f"{checkpoints} (step-<N> folders)" + (f" and {checkpoints / nemo_name}" if nemo_name else "")
    raise config_fault(key, path, f"{source} writes {written}, not this; name one of those")


def check_step_name(
    key: str,
    name: str,
    max_steps: int | None,
    every_n_steps: int | None,
    source: str,
    keep: int | None = None,
    monitor: str | None = "step",
) -> None:
    """`latest`, or a step-<N> folder the training saves (every every_n_steps steps and at its last step) and still
    holds when it ends: with monitor step it keeps the newest `keep` (save_top_k; -1 keeps all). Saves it makes on
    its own (a time limit, SIGTERM) come later and only push older ones out, so a folder pruned here is gone."""
    if name == "latest":
        return
    match = _STEP_FOLDER.fullmatch(name)
    if match is None:
        raise config_fault(key, name, "name latest (the newest complete checkpoint) or a folder such as step-100")
    step = int(match.group(1))
    if max_steps is None:  # a run bounded by epochs or time: its last step, saved too, is not known here
        return
    periodic = range(every_n_steps, max_steps, every_n_steps) if every_n_steps else range(0)
    saved = sorted({*periodic, max_steps})
    if step not in saved:
        interval = f"every {every_n_steps} steps and " if every_n_steps else ""
        raise config_fault(
            key,
            name,
            f"{source} saves step-<N> folders {interval}at its last step ({max_steps}); name one of those, or latest",
        )
    if monitor == "step" and keep is not None and keep >= 0 and step not in saved[len(saved) - keep :]:
        kept = ", ".join(f"step-{s}" for s in saved[len(saved) - keep :]) or "none"
        raise config_fault(
            key,
            name,
            f"{source} keeps only its newest {keep} checkpoints (save_top_k), so this one is deleted before the "
            f"conversion runs; name one it keeps ({kept}), latest, or raise save_top_k",
        )
