"""Schema of the resolved `rlhf_eval` section (conf/rlhf_eval/gpt3/*.yaml): how a policy does by a reward model, in
one process (jobs/gpt/rlhf_eval.py).

    cfg = RlhfEvalConfig.from_dict(section, "rlhf_eval")
    cfg.reads(), cfg.writes(), cfg.results_file()

It reports the mean reward of the policy's responses to held-out prompts (sampled or greedy, seeded; with a
reference model also the policy's KL to it on those responses), the reward model's pairwise accuracy on a held-out
pairs file, and the policy's preference accuracy there: the share of pairs whose chosen response gains more summed
log-probability from the reference to the policy than the rejected one (raw summed log-probabilities without a
reference). Files are those of a preference directory (contract/preference_data.py).
"""

import dataclasses
from typing import Any, Literal

from ..binding import bind_stage, config_fault, field_fault, positive, positive_fields
from .common_training import Precision, TrainerClock, check_world_size
from .run import RunBase

STAGE = "rlhf_eval"
RESULTS_FILE = "rlhf_eval.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalRun(RunBase):
    model_train_name: str | None = None  # the pre-training run whose RLHF results are evaluated (names the paths)


@dataclasses.dataclass(frozen=True)
class EvalTrainer(TrainerClock):
    num_nodes: int = 1  # one process: the models are small enough to evaluate whole
    devices: int = 1
    accelerator: Literal["gpu", "cpu"] = "gpu"
    precision: Precision = "bf16"  # of all three models while they run

    def check(self, key: str) -> None:
        if (self.num_nodes, self.devices) != (1, 1):
            raise field_fault(self, key, "devices", "rlhf_eval runs in one process: set num_nodes 1 and devices 1")


@dataclasses.dataclass(frozen=True)
class EvalExpManager:
    explicit_log_dir: str  # rlhf_eval.json (every figure, the settings and the files it read) is written here


@dataclasses.dataclass(frozen=True)
class GenerationSection:
    greedy: bool = False  # true: the likeliest token every time (then temperature, top_k, top_p are unused)
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1.0: no nucleus cut
    max_new_tokens: int = 32  # a response ends at the end-of-document id or after this many tokens
    min_new_tokens: int = 1  # the end-of-document id is not chosen before this many tokens
    samples_per_prompt: int = 1  # responses per prompt (sampled ones differ)

    def check(self, key: str) -> None:
        positive_fields(self, key, "temperature", "max_new_tokens", "samples_per_prompt")
        if self.top_k < 0:
            raise field_fault(self, key, "top_k", "must be >= 0 (0: no top-k cut)")
        if not 0 < self.top_p <= 1:
            raise field_fault(self, key, "top_p", "must be in (0, 1] (1.0: no nucleus cut)")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise field_fault(self, key, "min_new_tokens", f"must be within 0..max_new_tokens({self.max_new_tokens})")


@dataclasses.dataclass(frozen=True)
class EvalData:
    prompts_file: str  # held-out prompts: <dir>/<split>_prompts.jsonl
    pairs_file: str  # held-out comparisons: <dir>/<split>_pairs.jsonl
    max_prompts: int | None = None  # the first N prompts; null: all
    max_pairs: int | None = None  # the first N pairs; null: all
    max_seq_length: int = 2048  # longest prompt + response of a pair; a longer pair is refused, never cut
    micro_batch_size: int = 16  # sequences (prompts, or pairs) per forward pass

    def check(self, key: str) -> None:
        for name in ("prompts_file", "pairs_file"):
            if not getattr(self, name):
                raise field_fault(self, key, name, "name a file of the preference directory data preparation wrote")
        for name in ("max_prompts", "max_pairs"):
            if getattr(self, name) is not None:
                positive(f"{key}.{name}", getattr(self, name))
        positive_fields(self, key, "max_seq_length", "micro_batch_size")


@dataclasses.dataclass(frozen=True)
class EvalModel:
    policy_path: str  # the policy .nemo (PPO's actor, DPO's result, or the SFT model for a baseline)
    reward_model_path: str  # a reward-model .nemo (rlhf_rm's result)
    data: EvalData
    reference_path: str | None = None  # the policy's starting point (the SFT .nemo); null: raw log-probabilities
    seed: int = 1234  # of the sampled responses
    generation: GenerationSection = GenerationSection()

    def check(self, key: str) -> None:
        for name in ("policy_path", "reward_model_path"):
            if not getattr(self, name):
                raise field_fault(self, key, name, "name a .nemo file")


@dataclasses.dataclass(frozen=True)
class RlhfEvalConfig:
    run: EvalRun
    trainer: EvalTrainer
    exp_manager: EvalExpManager
    model: EvalModel

    stage = STAGE

    def check(self, key: str) -> None:
        if self.model.reference_path is not None and self.model.reference_path == self.model.policy_path:
            raise config_fault(
                f"{key}.model.reference_path",
                self.model.reference_path,
                "is the policy itself, so every log-ratio is 0: name the policy's starting .nemo, or null",
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], stage: Literal["rlhf_eval"] = STAGE) -> "RlhfEvalConfig":
        return bind_stage(cls, data, stage)

    def reads(self) -> list[tuple[str, str]]:
        key, m = f"{STAGE}.model", self.model
        found = [(f"{key}.policy_path", m.policy_path), (f"{key}.reward_model_path", m.reward_model_path)]
        if m.reference_path:
            found.append((f"{key}.reference_path", m.reference_path))
        return found + [
            (f"{key}.data.prompts_file", m.data.prompts_file),
            (f"{key}.data.pairs_file", m.data.pairs_file),
        ]

    def writes(self) -> list[str]:
        return [self.exp_manager.explicit_log_dir]

    def results_file(self) -> str:
        return f"{self.exp_manager.explicit_log_dir}/{RESULTS_FILE}"

    def data_parallel_size(self, world_size: int) -> int:
        check_world_size(self.trainer, world_size, STAGE)
        return 1
