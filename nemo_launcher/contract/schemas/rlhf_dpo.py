"""Schema of the resolved `rlhf_dpo` section (conf/rlhf_dpo/gpt3/*.yaml): direct preference optimisation of a GPT
policy against a frozen reference, whose log-probabilities a job of their own computes first.

    cfg = DpoConfig.from_dict(section, "rlhf_dpo")
    cfg.reference_reads(), cfg.reference_writes()     # the reference job (jobs/gpt/rlhf_dpo_reference.py)
    cfg.reads(), cfg.writes()                         # the DPO trainer (jobs/gpt/rlhf_dpo.py)

Both programs bind this one schema. The DPO keys under model.dpo are NeMo-Aligner's (`ref_policy_kl_penalty` is the
beta of the DPO loss; `preference_loss_weight`, `sft_loss_weight`, `preference_average_log_probs`,
`sft_average_log_probs`); NeMo-RL spells beta `reference_policy_kl_penalty` and keeps the other names. The data is a
preference directory as contract/preference_data.py lays it out; batch sizes count pairs (a pair is two sequences).
With model.peft (LoRA-DPO) the base model stays frozen and the reference is the base with the adapters off, so the
reference is model.restore_from_path itself and the tuned policy is always written merged.
"""

import dataclasses
from typing import Any, Literal

from ..binding import bind_stage, config_fault, field_fault, fraction, no_pipeline_parallel, positive, positive_fields
from ..preference_data import METADATA_FILE, pairs_file
from .common_training import OptimSection, check_layout, check_schedule, check_world_size
from .common_tuning import SftExpManager, SftRun, SftTrainer
from .gpt_sft import PeftSection

STAGE = "rlhf_dpo"
# The splits DPO reads: it trains on one and reports held-out preference accuracy on the other.
TRAIN_SPLIT, VALIDATION_SPLIT = "train", "validation"


@dataclasses.dataclass(frozen=True)
class DpoSection:
    ref_policy_kl_penalty: float = 0.1  # beta: how far the policy's log-ratio to the reference is scaled in the loss
    preference_loss_weight: float = 1.0  # weight of -log sigmoid(beta x margin of log-ratios)
    sft_loss_weight: float = 0.0  # weight of the NLL of the chosen response (0 = pure DPO)
    preference_average_log_probs: bool = False  # the preference loss compares per-token means, not sums
    sft_average_log_probs: bool = True  # the SFT term is the per-token mean NLL (false: the summed NLL)

    def check(self, key: str) -> None:
        positive(f"{key}.ref_policy_kl_penalty", self.ref_policy_kl_penalty)
        for name in ("preference_loss_weight", "sft_loss_weight"):
            if getattr(self, name) < 0:
                raise field_fault(self, key, name, "must be >= 0")
        if self.preference_loss_weight == 0 and self.sft_loss_weight == 0:
            raise field_fault(self, key, "preference_loss_weight", "and sft_loss_weight are both 0: nothing to train")


@dataclasses.dataclass(frozen=True)
class PreferenceDataSection:
    data_dir: str  # a preference directory: <split>_pairs.jsonl and metadata.json (contract/preference_data.py)
    # Longest prompt + response in tokens; a longer pair is refused (jobs/rlhf/pairs.py), never cut. At most the
    # model's max_position_embeddings.
    max_seq_length: int = 512
    num_workers: int = 0  # DataLoader worker processes per rank

    def check(self, key: str) -> None:
        if not self.data_dir:
            raise field_fault(self, key, "data_dir", "name the preference directory data preparation wrote")
        if self.max_seq_length < 2:
            raise field_fault(self, key, "max_seq_length", "must be >= 2 (a prompt token and a response token)")
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")

    def pairs(self, split: str) -> str:
        return pairs_file(self.data_dir, split)

    def metadata(self) -> str:
        return f"{self.data_dir}/{METADATA_FILE}"


@dataclasses.dataclass(frozen=True)
class ReferenceSection:
    # The .nemo whose log-probabilities are the reference; null: model.restore_from_path (the policy's start).
    model_path: str | None = None
    # Where the reference job writes its copies of the pairs files (with ref_chosen, ref_rejected).
    output_dir: str = ""
    micro_batch_size: int = 8  # pairs per forward pass of the reference job

    def check(self, key: str) -> None:
        if not self.output_dir:
            raise field_fault(self, key, "output_dir", "name the folder for the reference log-probs")
        positive(f"{key}.micro_batch_size", self.micro_batch_size)


@dataclasses.dataclass(frozen=True)
class DpoModel:
    restore_from_path: str  # the policy's starting .nemo (an SFT model)
    global_batch_size: int  # pairs per optimizer step over all data-parallel ranks
    micro_batch_size: int  # pairs per forward pass per rank (each pair is two sequences)
    optim: OptimSection
    data: PreferenceDataSection
    reference: ReferenceSection
    dpo: DpoSection = DpoSection()
    tensor_model_parallel_size: int = 1  # any TP dividing the heads; a .nemo of another layout is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1
    seed: int = 1234
    # 0 by default: with dropout the policy's log-probs differ from the reference's even before any step.
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    peft: PeftSection | None = None  # LoRA-DPO: adapters on the frozen base, whose log-probs are the reference

    def check(self, key: str) -> None:
        if not self.restore_from_path:
            raise field_fault(self, key, "restore_from_path", "name the .nemo the policy starts from (an SFT model)")
        positive_fields(self, key, "global_batch_size", "micro_batch_size", "tensor_model_parallel_size")
        no_pipeline_parallel(
            self, key, "DPO runs without pipeline parallelism: set 1 and split a large model with TP instead"
        )
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)
        if self.peft is not None:
            reference = self.reference.model_path
            if reference is not None and reference != self.restore_from_path:
                raise config_fault(
                    f"{key}.reference.model_path",
                    reference,
                    "LoRA-DPO's reference is the base model with its adapters off: set null (or restore_from_path)",
                )
            if not self.peft.merge:
                raise config_fault(
                    f"{key}.peft.merge",
                    False,
                    "DPO writes the tuned policy merged (a plain GPT .nemo) beside the adapter file: set true",
                )

    def reference_model(self) -> str:
        return self.reference.model_path or self.restore_from_path


@dataclasses.dataclass(frozen=True)
class DpoConfig:
    run: SftRun
    trainer: SftTrainer
    exp_manager: SftExpManager
    model: DpoModel

    def check(self, key: str) -> None:
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)
        check_schedule(self.model, self.trainer, key)

    @classmethod
    def from_dict(cls, data: dict[str, Any], stage: Literal["rlhf_dpo"] = STAGE) -> "DpoConfig":
        return bind_stage(cls, data, stage)

    stage = STAGE

    # ---- the reference job ---------------------------------------------------------------------------
    def reference_file(self, split: str) -> str:
        """The reference job's copy of a split's pairs file, with ref_chosen and ref_rejected on every line."""
        return pairs_file(self.model.reference.output_dir, split)

    def reference_reads(self) -> list[tuple[str, str]]:
        m = f"{STAGE}.model"
        model_key = f"{m}.reference.model_path" if self.model.reference.model_path else f"{m}.restore_from_path"
        return [(model_key, self.model.reference_model()), *self._data_reads()]

    def reference_writes(self) -> list[str]:
        return [self.model.reference.output_dir]

    # ---- the DPO trainer -----------------------------------------------------------------------------
    def reads(self) -> list[tuple[str, str]]:
        m = f"{STAGE}.model"
        paths = [(f"{m}.restore_from_path", self.model.restore_from_path), *self._data_reads()]
        if self.model.peft is not None and self.model.peft.restore_from_path:
            paths.append((f"{m}.peft.restore_from_path", self.model.peft.restore_from_path))
        paths += [
            (f"{m}.reference.output_dir", self.reference_file(split)) for split in (TRAIN_SPLIT, VALIDATION_SPLIT)
        ]
        return paths

    def writes(self) -> list[str]:
        return [self.exp_manager.explicit_log_dir]

    def _data_reads(self) -> list[tuple[str, str]]:
        key, data = f"{STAGE}.model.data.data_dir", self.model.data
        return [(key, data.metadata())] + [(key, data.pairs(split)) for split in (TRAIN_SPLIT, VALIDATION_SPLIT)]

    def policy_path(self) -> str:
        """The tuned policy: a plain GPT .nemo (merged for LoRA-DPO) that conversion, evaluation and export read."""
        return self.exp_manager.nemo_path()

    def adapter_path(self) -> str:
        """LoRA-DPO's adapter file, written beside the merged policy."""
        return self.exp_manager.nemo_path("_lora")

    def data_parallel_size(self, world_size: int) -> int:
        check_world_size(self.trainer, world_size, STAGE)
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, STAGE)
