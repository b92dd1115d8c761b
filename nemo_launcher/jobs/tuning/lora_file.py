"""The LoRA adapter file, and merging it into a base model's weights without building the model.

    save_adapter_file("adapter.nemo", lora_section, adapters.state_dict(), base_model="megatron_gpt.nemo")
    settings, state = load_adapter_file("adapter.nemo")
    merged = merge_into_state_dict(base_state_dict, settings, state)       # full (TP=1) state dicts

The adapter file is a `.nemo` archive (nemo_archive.py) whose config holds only `peft:` settings and the
base model it was trained on, and whose weights are the adapters alone, whole (not split by TP), named
`<linear>.lora.a` (adapter_dim x in) and `<linear>.lora.b` (out x adapter_dim) after the linear they adapt.
"""

import dataclasses
from typing import Any

import torch

from ...contract.schemas.gpt_sft import LoraSection
from ..common.config import JobConfigError
from ..core.nemo_archive import load_nemo, save_nemo

_SUFFIX_A, _SUFFIX_B = ".lora.a", ".lora.b"


def save_adapter_file(path: str, section: LoraSection, state: dict[str, torch.Tensor], base_model: str) -> None:
    settings = {"peft_scheme": "lora", **dataclasses.asdict(section)}
    save_nemo(path, {"peft": settings, "base_model": str(base_model)}, state, tokenizer_files={})


def load_adapter_file(path: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(peft settings, adapter state dict); refuses a .nemo that is not an adapter file."""
    config, state = load_nemo(path)  # an adapter file is one state dict, never sharded
    settings = config.get("peft")
    if not isinstance(settings, dict) or settings.get("peft_scheme") != "lora":
        raise JobConfigError(
            f"{path}: not a LoRA adapter file (its config has no peft.peft_scheme: lora); is it a full model .nemo?"
        )
    return settings, state


def merge_into_state_dict(
    base: dict[str, torch.Tensor], settings: dict[str, Any], state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """A copy of `base` with W += alpha / adapter_dim x B A for every adapter; computed in fp32 and stored
    in each weight's own dtype."""
    scale = float(settings["alpha"]) / int(settings["adapter_dim"])
    merged = dict(base)
    for key_a in sorted(k for k in state if k.endswith(_SUFFIX_A)):
        name = key_a[: -len(_SUFFIX_A)]
        key_b, key_w = name + _SUFFIX_B, name + ".weight"
        if key_b not in state:
            raise JobConfigError(f"adapter file: {key_a} has no matching {key_b}")
        if key_w not in base:
            raise JobConfigError(
                f"adapter file: adapts {name}, which the base model does not have (another architecture?)"
            )
        a, b, weight = state[key_a].float(), state[key_b].float(), base[key_w]
        if (b.shape[0], a.shape[1]) != tuple(weight.shape):
            raise JobConfigError(
                f"adapter file: {name} update is {b.shape[0]} x {a.shape[1]}, the base weight is "
                f"{tuple(weight.shape)} (another base model?)"
            )
        merged[key_w] = (weight.float() + scale * (b @ a)).to(weight.dtype)
    return merged
