"""PEFT stage: LoRA adapters trained on a frozen `.nemo`, same data and job layout as fine-tuning.

    python3 main.py stages=[peft] peft=gpt3/squad peft.run.model_train_name=gpt3_126m

The job writes the adapter file and, with model.peft.merge: true, a `.nemo` with the adapters merged in.
"""
from typing import Any, Dict

from ..errors import config_error
from .base import positive_int
from .fine_tuning import FineTuningStage

SCHEMES = ("lora",)
# Linear layers of a transformer layer that can carry an adapter ("all" = every one of them).
TARGET_MODULES = ("attention_qkv", "attention_dense", "mlp_fc1", "mlp_fc2", "all")


class PeftStage(FineTuningStage):
    kind = "peft"

    def check_method(self, config: Dict[str, Any]) -> None:
        peft = (config.get("model") or {}).get("peft")
        key = lambda *parts: self.key("model", "peft", *parts)  # noqa: E731
        if not isinstance(peft, dict):
            raise config_error(key(), peft, "needs a peft section with peft_scheme and lora_tuning")
        if peft.get("peft_scheme") not in SCHEMES:
            raise config_error(key("peft_scheme"), peft.get("peft_scheme"), f"choose one of {', '.join(SCHEMES)}")
        lora = peft.get("lora_tuning") or {}
        positive_int(key("lora_tuning", "adapter_dim"), lora.get("adapter_dim"))
        alpha = lora.get("alpha")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
            raise config_error(key("lora_tuning", "alpha"), alpha, "must be a positive number (the update is scaled by alpha / adapter_dim)")
        dropout = lora.get("adapter_dropout", 0.0)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise config_error(key("lora_tuning", "adapter_dropout"), dropout, "must be in [0, 1)")
        targets = lora.get("target_modules")
        if not isinstance(targets, list) or not targets or any(t not in TARGET_MODULES for t in targets):
            raise config_error(key("lora_tuning", "target_modules"), targets, f"list some of {', '.join(TARGET_MODULES)}")
