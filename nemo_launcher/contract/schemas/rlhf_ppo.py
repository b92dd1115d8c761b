"""Schema of the resolved `rlhf_ppo` section (conf/rlhf_ppo/gpt3/*.yaml): PPO as the seed's cooperating roles.

    cfg = PpoConfig.from_dict(section, "rlhf_ppo")
    cfg.roles()          # (PpoRole, ...) in het-group order: servers first, the actor last
    cfg.reads(), cfg.writes(), cfg.actor_log_dir()
    cfg.role_data_parallel_size("critic", world_size)   # a role's program: its processes checked, its DP

Four programs bind this one section (jobs/gpt/rlhf_ppo_{reward_model,initial_policy,critic,actor}.py), each reading
its own part; the launcher binds it once and places the roles. `critic` and `actor` keep the reference launcher's
keys (NeMo-Framework-Launcher conf/rlhf_ppo/gpt3/2b_ppo.yaml); `reward_model` and `initial_policy` are the seed's two
server roles. With critic.trainer.ppo.combine_rm_and_critic_server the critic also answers /rewards (the reference's
two-role layout, no reward-model role); with initial_policy.serve false the actor keeps a frozen copy of its own
starting weights as the KL reference (no initial-policy role).

The seed's consistency rules (its RLHF guide) are checked here, so the launcher refuses a mismatched set before
anything is queued and each role's program refuses it alike:
  critic.exp_manager.checkpoint_callback_params.every_n_train_steps
      = actor.trainer.ppo.val_check_interval x actor.model.global_batch_size / critic.model.global_batch_size
  <role> inference micro-batch = ceil(actor.model.ppo.rollout_micro_batch_size / <role> DP), DP = devices x nodes / TP
  critic.model.ppo_epochs = actor.model.ppo.epochs
"""

import dataclasses
import math
from typing import Literal

from ..binding import (
    StageSchema,
    config_fault,
    field_fault,
    fraction,
    no_pipeline_parallel,
    non_negative,
    positive,
    positive_fields,
)
from ..durations import WallClock
from ..rlhf_roles import ACTOR, CRITIC, HOST_VARIABLES, INITIAL_POLICY, REWARD_MODEL, ROLE_ORDER, ROLE_PROGRAMS
from .common_training import OptimSection, Precision, TrainerClock, check_layout, check_world_size
from .run import RunBase

STAGE = "rlhf_ppo"
SERVER_ROLES = (REWARD_MODEL, INITIAL_POLICY, CRITIC)
# The highest port number; ports below 1024 need root on the nodes.
_PORTS = (1024, 65535)


@dataclasses.dataclass(frozen=True)
class PpoRole:
    """One role as the launcher places it: one Slurm het group (or one group of local processes) of `nodes` x
    `devices` processes running `program_kind`'s program; the launcher exports the group's first host as
    `host_variable` to every role (None for the actor, which serves nothing)."""

    name: str  # reward_model, initial_policy, critic or actor
    program_kind: str  # rlhf_ppo_<name>: the family row maps it to its module
    nodes: int
    devices: int  # processes per node
    host_variable: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PpoRun(RunBase):
    monitor_grace_s: int = 60  # seconds the monitor lets the other roles run after the first one ends (seed: 60)
    server_wait_s: int = 900  # seconds the actor waits for every server to answer ready before giving up

    def check(self, key: str) -> None:
        super().check(key)
        non_negative(f"{key}.monitor_grace_s", self.monitor_grace_s)
        positive(f"{key}.server_wait_s", self.server_wait_s)


@dataclasses.dataclass(frozen=True)
class RoleTrainer(TrainerClock):
    """Where a server role runs: num_nodes x devices processes, one per device."""

    devices: int  # processes (GPUs) per node
    num_nodes: int = 1
    accelerator: Literal["gpu", "cpu"] = "gpu"
    precision: Precision = "bf16"
    max_time = None  # servers run until the actor shuts them down

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices")


@dataclasses.dataclass(frozen=True)
class ServedModel:
    restore_from_path: str | None  # the .nemo this role serves
    tensor_model_parallel_size: int = 1
    inference_micro_batch_size: int = 1  # sequences per forward pass on each data-parallel rank

    def check(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size", "inference_micro_batch_size")


@dataclasses.dataclass(frozen=True)
class RewardStandardization:
    """The reference's reward standardization: the served reward is (scalar - mean) / std, so that the reward model's
    scale (which the pairwise loss leaves free) sits where the KL penalty was tuned. Off: the scalar as it is."""

    enable: bool = False
    mean: float | None = None  # e.g. the reward model's mean score on the training prompts' SFT responses
    std: float | None = None

    def check(self, key: str) -> None:
        if self.enable:
            if self.mean is None:
                raise field_fault(self, key, "mean", "set it (and std) when enable is true")
            if self.std is None or self.std <= 0:
                raise field_fault(self, key, "std", "must be a positive number when enable is true")

    def shift_and_scale(self) -> tuple[float, float]:
        """(mean, std) to serve (scalar - mean) / std with; (0, 1) when off."""
        return (self.mean, self.std) if self.enable else (0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class RewardServedModel(ServedModel):
    reward_standardization: RewardStandardization = RewardStandardization()


@dataclasses.dataclass(frozen=True)
class RewardModelRole:
    """The reward-model server (seed port 5555): POST /rewards, the scalar at each sequence's last token."""

    trainer: RoleTrainer
    # restore_from_path: the reward-model .nemo (rlhf_rm's result); with combine_rm_and_critic_server the critic serves
    # it (and its reward_standardization) in its own processes.
    model: RewardServedModel
    port: int = 5555


@dataclasses.dataclass(frozen=True)
class InitialPolicyRole:
    """The frozen initial policy (seed port 5556): POST /logprobs, the KL reference's token log-probabilities."""

    trainer: RoleTrainer
    model: ServedModel  # restore_from_path: the SFT .nemo the actor starts from
    port: int = 5556
    serve: bool = True  # false: no role; the actor keeps a frozen copy of its starting weights (2 roles)


@dataclasses.dataclass(frozen=True)
class CriticPpo:
    inference_micro_batch_size: int  # sequences per /values or /rewards forward pass on each data-parallel rank
    port: int = 5557
    combine_rm_and_critic_server: bool = False  # the critic also serves /rewards from a frozen reward model
    max_steps: int = 10000  # critic optimizer steps the learning-rate schedule spans
    gradient_clip_val: float | None = 1.0  # max global L2 norm of the critic's gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        positive_fields(self, key, "inference_micro_batch_size", "max_steps")
        if self.gradient_clip_val is not None:
            non_negative(f"{key}.gradient_clip_val", self.gradient_clip_val)


@dataclasses.dataclass(frozen=True)
class CriticTrainer(TrainerClock):
    devices: int
    ppo: CriticPpo
    num_nodes: int = 1
    accelerator: Literal["gpu", "cpu"] = "gpu"
    precision: Precision = "bf16"
    max_time = None  # the critic runs until the actor shuts it down

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices")


@dataclasses.dataclass(frozen=True)
class PretrainedCheckpoint:
    restore_from_path: str | None  # the .nemo the role's trained model starts from


@dataclasses.dataclass(frozen=True)
class CriticCheckpointParams:
    # Critic optimizer steps between the critic's checkpoints: the seed ties it to the actor's interval (see the
    # module's rules) so the two checkpoint the same moments of the run.
    every_n_train_steps: int

    def check(self, key: str) -> None:
        positive(f"{key}.every_n_train_steps", self.every_n_train_steps)


@dataclasses.dataclass(frozen=True)
class CriticExpManager:
    explicit_log_dir: str  # the critic's saved states (/save), its log and, at shutdown, checkpoints/<name>.nemo
    checkpoint_callback_params: CriticCheckpointParams
    name: str = "megatron_gpt_critic"

    def nemo_path(self) -> str:
        return f"{self.explicit_log_dir}/checkpoints/{self.name}.nemo"


@dataclasses.dataclass(frozen=True)
class CriticModel:
    micro_batch_size: int  # sequences per forward/backward pass on each data-parallel rank
    global_batch_size: int  # sequences per critic optimizer step
    optim: OptimSection
    loss_clip_val: float = 0.2  # PPO value clipping: the value may move this far from the rollout's; 0 = off
    ppo_epochs: int = 1  # passes over each /train batch; must equal actor.model.ppo.epochs
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1  # must be 1
    seed: int = 1234
    hidden_dropout: float = 0.0  # dropout makes the served values noisy; PPO runs without it
    attention_dropout: float = 0.0

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size", "global_batch_size", "ppo_epochs", "tensor_model_parallel_size")
        non_negative(f"{key}.loss_clip_val", self.loss_clip_val)
        no_pipeline_parallel(self, key, "the critic runs without pipeline stages: set 1 and use tensor parallelism")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)


@dataclasses.dataclass(frozen=True)
class CriticRole:
    """The critic (seed port 5557): initialised from the reward model, trained on /train, serving /values."""

    trainer: CriticTrainer
    pretrained_checkpoint: PretrainedCheckpoint  # the reward-model .nemo
    exp_manager: CriticExpManager
    model: CriticModel


@dataclasses.dataclass(frozen=True)
class ActorPpoTrainer:
    val_check_interval: int  # PPO steps between validations (rollouts on the validation prompts)
    save_interval: int  # PPO steps between checkpoints of the actor (and, through /save, of the critic)
    max_steps: int = -1  # PPO steps (one rollout batch, then its update, each); -1: max_epochs over the prompts
    max_epochs: int = 1  # passes over the training prompts when max_steps is -1
    gradient_clip_val: float | None = 1.0  # max global L2 norm of the policy's gradients; null or 0 = no clipping
    initial_policy_kl_penalty: float = 0.01  # beta: per-token reward -= beta x KL(policy || initial policy)
    use_absolute_kl: bool = True  # penalise |log pi - log pi_ref|, so no token earns reward for being unlikely
    discount_factor: float = 1.0  # gamma of the returns
    gae_lambda: float = 0.95  # lambda of generalised advantage estimation
    normalize_advantages: bool = True  # whiten the advantages of each rollout batch

    def check(self, key: str) -> None:
        positive_fields(self, key, "val_check_interval", "save_interval", "max_epochs")
        if self.max_steps != -1:
            positive(f"{key}.max_steps", self.max_steps)
        if self.gradient_clip_val is not None:
            non_negative(f"{key}.gradient_clip_val", self.gradient_clip_val)
        non_negative(f"{key}.initial_policy_kl_penalty", self.initial_policy_kl_penalty)
        for name in ("discount_factor", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise field_fault(self, key, name, "must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class ActorTrainer(TrainerClock):
    devices: int
    ppo: ActorPpoTrainer
    num_nodes: int = 1
    accelerator: Literal["gpu", "cpu"] = "gpu"
    precision: Precision = "bf16"
    max_time: WallClock | None = None  # "DD:HH:MM:SS" of wall time per start; then save and exit 0 (the job requeues)

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices")


@dataclasses.dataclass(frozen=True)
class RemoteRole:
    """Where the actor finds a server: `ip` when set, else the host the launcher exported for the role
    (NEMO_RLHF_<ROLE>_HOST), else localhost; `port` must be the role's own."""

    port: int
    ip: str | None = None


@dataclasses.dataclass(frozen=True)
class RemoteCriticRm:
    critic: RemoteRole
    reward_model: RemoteRole  # unused when combined: the critic answers /rewards
    initial_policy: RemoteRole  # unused when initial_policy.serve is false
    combine_rm_and_critic_server: bool = False  # must match critic.trainer.ppo.combine_rm_and_critic_server
    timeout_s: float = 600.0  # seconds the actor waits for one answer (a critic /train on a large batch takes long)

    def check(self, key: str) -> None:
        positive(f"{key}.timeout_s", self.timeout_s)


@dataclasses.dataclass(frozen=True)
class ActorCheckpointParams:
    save_top_k: int = 2  # newest complete actor checkpoints kept; -1 keeps all

    def check(self, key: str) -> None:
        if self.save_top_k == 0 or self.save_top_k < -1:
            raise field_fault(self, key, "save_top_k", "must be >= 1 or -1 (keep all)")


@dataclasses.dataclass(frozen=True)
class ActorExpManager:
    explicit_log_dir: str  # checkpoints/step-<N>, TensorBoard events, the metrics, and checkpoints/<name>.nemo
    name: str = "megatron_gpt_ppo_actor"
    checkpoint_callback_params: ActorCheckpointParams = ActorCheckpointParams()
    resume_if_exists: bool = True  # continue exactly from the newest complete checkpoint in explicit_log_dir
    create_tensorboard_logger: bool = True

    def nemo_path(self) -> str:
        return f"{self.explicit_log_dir}/checkpoints/{self.name}.nemo"


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How rollouts are sampled. The PPO ratio uses the policy's own log-probabilities: anything but plain sampling
    (temperature 1, no top-k/top-p) makes the sampled distribution differ from the one trained (the seed warns)."""

    use_greedy: bool = False  # argmax decoding: no exploration; for debugging only
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def check(self, key: str) -> None:
        positive(f"{key}.temperature", self.temperature)
        non_negative(f"{key}.top_k", self.top_k)
        if not 0.0 < self.top_p <= 1.0:
            raise field_fault(self, key, "top_p", "must be in (0, 1]; 1.0 turns it off")


@dataclasses.dataclass(frozen=True)
class LengthParams:
    max_length: int  # tokens generated at most per rollout (fewer when the end-of-document token comes first)
    min_length: int = 1  # tokens generated at least before the end-of-document token may end a rollout

    def check(self, key: str) -> None:
        positive(f"{key}.max_length", self.max_length)
        if not 0 <= self.min_length <= self.max_length:
            raise field_fault(self, key, "min_length", f"must be in [0, max_length({self.max_length})]")


@dataclasses.dataclass(frozen=True)
class ActorPpoModel:
    rollout_micro_batch_size: int  # prompts generated together on each data-parallel rank
    num_rollout_samples: int  # rollouts per PPO step, over all data-parallel ranks
    length_params: LengthParams
    forward_micro_batch_size: int | None = None  # sequences per log-prob forward pass; null = rollout_micro_batch_size
    val_rollout_micro_batch_size: int | None = None  # null = rollout_micro_batch_size
    num_val_samples: int | None = None  # validation rollouts per validation; null = num_rollout_samples
    entropy_bonus: float = 0.0  # weight of the policy entropy added to the objective
    ratio_eps: float = 0.2  # the probability ratio is clipped to [1 - eps, 1 + eps]
    epochs: int = 1  # passes of the policy update over each rollout batch; must equal critic.model.ppo_epochs
    sampling_params: SamplingParams = SamplingParams()

    def check(self, key: str) -> None:
        positive_fields(self, key, "rollout_micro_batch_size", "num_rollout_samples", "epochs")
        for name in ("forward_micro_batch_size", "val_rollout_micro_batch_size", "num_val_samples"):
            if getattr(self, name) is not None:
                positive(f"{key}.{name}", getattr(self, name))
        non_negative(f"{key}.entropy_bonus", self.entropy_bonus)
        positive(f"{key}.ratio_eps", self.ratio_eps)

    @property
    def forward_batch(self) -> int:
        return self.forward_micro_batch_size or self.rollout_micro_batch_size

    @property
    def val_micro_batch(self) -> int:
        return self.val_rollout_micro_batch_size or self.rollout_micro_batch_size

    @property
    def val_samples(self) -> int:
        return self.num_val_samples or self.num_rollout_samples


@dataclasses.dataclass(frozen=True)
class PromptFiles:
    train: str  # <dir>/train_prompts.jsonl (contract/preference_data.py): {"prompt": [ids], "text": ...} per line
    validation: str  # <dir>/validation_prompts.jsonl


@dataclasses.dataclass(frozen=True)
class ActorData:
    data_prefix: PromptFiles
    max_prompt_length: int = 256  # longer prompts keep their last tokens

    def check(self, key: str) -> None:
        for name in ("train", "validation"):
            if not getattr(self.data_prefix, name):
                raise config_fault(f"{key}.data_prefix.{name}", getattr(self.data_prefix, name), "name a prompts file")
        positive(f"{key}.max_prompt_length", self.max_prompt_length)


@dataclasses.dataclass(frozen=True)
class ActorModel:
    ppo: ActorPpoModel
    micro_batch_size: int  # rollouts per forward/backward pass of the policy update on each data-parallel rank
    global_batch_size: int  # rollouts per policy optimizer step
    optim: OptimSection
    data: ActorData
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1  # must be 1
    seed: int = 1234
    hidden_dropout: float = 0.0  # dropout would make the update's log-probs differ from the rollout's
    attention_dropout: float = 0.0

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size", "global_batch_size", "tensor_model_parallel_size")
        no_pipeline_parallel(self, key, "the actor runs without pipeline stages: set 1 and use tensor parallelism")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)


@dataclasses.dataclass(frozen=True)
class ActorRole:
    """The actor (the policy, the seed's master controller): rollouts, rewards, GAE and the clipped PPO update."""

    trainer: ActorTrainer
    remote_critic_rm: RemoteCriticRm
    exp_manager: ActorExpManager
    pretrained_checkpoint: PretrainedCheckpoint  # the SFT .nemo
    model: ActorModel


@dataclasses.dataclass(frozen=True)
class PpoConfig(StageSchema, stage=STAGE):
    run: PpoRun
    reward_model: RewardModelRole
    initial_policy: InitialPolicyRole
    critic: CriticRole
    actor: ActorRole

    def check(self, key: str) -> None:
        _check_model_paths(self, key)
        layouts = _check_layouts(self, key)
        _check_seed_rules(self, key, layouts)
        _check_batches(self, key, layouts)
        _check_addresses(self, key)
        _check_critic_schedule(self, key)
        _check_runnable(self, key, layouts)

    # -- what the launcher asks -------------------------------------------------------------------------------------

    @property
    def combined(self) -> bool:
        """The critic hosts the reward model (no reward-model role)."""
        return self.critic.trainer.ppo.combine_rm_and_critic_server

    def roles(self) -> tuple[PpoRole, ...]:
        """The roles to start, in het-group order: servers first, the actor last."""
        present = [
            name
            for name in ROLE_ORDER
            if not (name == REWARD_MODEL and self.combined)
            and not (name == INITIAL_POLICY and not self.initial_policy.serve)
        ]
        return tuple(
            PpoRole(
                name=name,
                program_kind=ROLE_PROGRAMS[name],
                nodes=self.role_trainer(name).num_nodes,
                devices=self.role_trainer(name).devices,
                host_variable=HOST_VARIABLES.get(name),
            )
            for name in present
        )

    def role_trainer(self, role: str):
        return getattr(self, role).trainer

    def reads(self) -> list[tuple[str, str]]:
        paths = [
            (
                f"{STAGE}.actor.pretrained_checkpoint.restore_from_path",
                self.actor.pretrained_checkpoint.restore_from_path,
            ),
            (
                f"{STAGE}.critic.pretrained_checkpoint.restore_from_path",
                self.critic.pretrained_checkpoint.restore_from_path,
            ),
            (f"{STAGE}.reward_model.model.restore_from_path", self.reward_model.model.restore_from_path),
        ]
        if self.initial_policy.serve:
            paths.append(
                (f"{STAGE}.initial_policy.model.restore_from_path", self.initial_policy.model.restore_from_path)
            )
        prompts = self.actor.model.data.data_prefix
        paths += [
            (f"{STAGE}.actor.model.data.data_prefix.{name}", getattr(prompts, name)) for name in ("train", "validation")
        ]
        return paths

    def writes(self) -> list[str]:
        return [self.actor.exp_manager.explicit_log_dir, self.critic.exp_manager.explicit_log_dir]

    def actor_log_dir(self) -> str:
        return self.actor.exp_manager.explicit_log_dir

    # -- what a role's program asks ---------------------------------------------------------------------------------

    def role_data_parallel_size(self, role: str, world_size: int) -> int:
        """The role's processes actually started checked against its trainer section; returns its DP."""
        check_world_size(self.role_trainer(role), world_size, f"{STAGE}.{role}")
        return _role_layout(self, role, STAGE)


def _role_layout(cfg: PpoConfig, role: str, key: str) -> int:
    """DP of a role: nodes x devices / TP, each factor shown when TP does not divide."""
    trainer = cfg.role_trainer(role)
    model = getattr(cfg, role).model
    if role in (CRITIC, ACTOR):
        return check_layout(model, trainer.num_nodes, trainer.devices, f"{key}.{role}")
    tp, world = model.tensor_model_parallel_size, trainer.num_nodes * trainer.devices
    if world % tp:
        raise config_fault(
            f"{key}.{role}.model.tensor_model_parallel_size",
            tp,
            f"TP({tp}) does not divide trainer.num_nodes({trainer.num_nodes}) x trainer.devices({trainer.devices}) "
            f"= {world}; change one of them",
        )
    return world // tp


def _check_model_paths(cfg: PpoConfig, key: str) -> None:
    required = [
        ("actor.pretrained_checkpoint", cfg.actor.pretrained_checkpoint, "the SFT .nemo the policy starts from"),
        ("critic.pretrained_checkpoint", cfg.critic.pretrained_checkpoint, "the reward-model .nemo (rlhf_rm's result)"),
        ("reward_model.model", cfg.reward_model.model, "the reward-model .nemo that scores the rollouts"),
    ]
    if cfg.initial_policy.serve:
        required.append(("initial_policy.model", cfg.initial_policy.model, "the SFT .nemo the KL is measured against"))
    for section_key, section, what in required:
        if not section.restore_from_path:
            raise field_fault(section, f"{key}.{section_key}", "restore_from_path", f"name {what}")


def _check_layouts(cfg: PpoConfig, key: str) -> dict[str, int]:
    """Each present role's data-parallel size."""
    return {role.name: _role_layout(cfg, role.name, key) for role in cfg.roles()}


def _check_seed_rules(cfg: PpoConfig, key: str, dp: dict[str, int]) -> None:
    actor, critic = cfg.actor, cfg.critic
    rollout = actor.model.ppo.rollout_micro_batch_size
    # The critic checkpoints at the same moments as the actor: its steps per actor interval.
    ratio = actor.trainer.ppo.val_check_interval * actor.model.global_batch_size
    every = critic.exp_manager.checkpoint_callback_params.every_n_train_steps
    if ratio % critic.model.global_batch_size or every != ratio // critic.model.global_batch_size:
        expected = ratio / critic.model.global_batch_size
        shown = int(expected) if expected == int(expected) else f"{expected:g}, not an integer"
        raise config_fault(
            f"{key}.critic.exp_manager.checkpoint_callback_params.every_n_train_steps",
            every,
            f"must equal actor.trainer.ppo.val_check_interval({actor.trainer.ppo.val_check_interval}) x "
            f"actor.model.global_batch_size({actor.model.global_batch_size}) / "
            f"critic.model.global_batch_size({critic.model.global_batch_size}) = {shown}",
        )
    # Each server splits an actor rank's rollout micro-batch over its own data-parallel ranks.
    inference = [
        (CRITIC, "critic.trainer.ppo.inference_micro_batch_size", critic.trainer.ppo.inference_micro_batch_size)
    ]
    if REWARD_MODEL in dp:
        inference.append(
            (
                REWARD_MODEL,
                "reward_model.model.inference_micro_batch_size",
                cfg.reward_model.model.inference_micro_batch_size,
            )
        )
    if INITIAL_POLICY in dp:
        inference.append(
            (
                INITIAL_POLICY,
                "initial_policy.model.inference_micro_batch_size",
                cfg.initial_policy.model.inference_micro_batch_size,
            )
        )
    for role, name, value in inference:
        trainer, tp = cfg.role_trainer(role), getattr(cfg, role).model.tensor_model_parallel_size
        expected = math.ceil(rollout / dp[role])
        if value != expected:
            raise config_fault(
                f"{key}.{name}",
                value,
                f"must equal ceil(actor.model.ppo.rollout_micro_batch_size({rollout}) / {role} data-parallel "
                f"size({dp[role]})) = {expected}, where that size = trainer.devices({trainer.devices}) x "
                f"trainer.num_nodes({trainer.num_nodes}) / TP({tp})",
            )
    if critic.model.ppo_epochs != actor.model.ppo.epochs:
        raise config_fault(
            f"{key}.critic.model.ppo_epochs",
            critic.model.ppo_epochs,
            f"must equal actor.model.ppo.epochs({actor.model.ppo.epochs}): the critic trains as many passes as the "
            "actor",
        )


def _check_batches(cfg: PpoConfig, key: str, dp: dict[str, int]) -> None:
    ppo, model = cfg.actor.model.ppo, cfg.actor.model
    actor_dp = dp[ACTOR]
    for samples_name, samples, mbs_name, mbs in (
        ("num_rollout_samples", ppo.num_rollout_samples, "rollout_micro_batch_size", ppo.rollout_micro_batch_size),
        ("num_val_samples", ppo.val_samples, "val_rollout_micro_batch_size", ppo.val_micro_batch),
    ):
        if samples % (mbs * actor_dp):
            raise config_fault(
                f"{key}.actor.model.ppo.{samples_name}",
                samples,
                f"must be a multiple of {mbs_name}({mbs}) x actor data-parallel size({actor_dp}) = {mbs * actor_dp}",
            )
    # A PPO step's rollouts are split into whole optimizer steps of the actor and of the critic.
    for role, gbs in (("actor", model.global_batch_size), ("critic", cfg.critic.model.global_batch_size)):
        if ppo.num_rollout_samples % gbs:
            raise config_fault(
                f"{key}.actor.model.ppo.num_rollout_samples",
                ppo.num_rollout_samples,
                f"must be a multiple of {role}.model.global_batch_size({gbs}): each PPO step's rollouts make whole "
                "optimizer steps",
            )
    if ppo.forward_batch > ppo.rollout_micro_batch_size or ppo.rollout_micro_batch_size % ppo.forward_batch:
        raise config_fault(
            f"{key}.actor.model.ppo.forward_micro_batch_size",
            ppo.forward_micro_batch_size,
            f"must divide rollout_micro_batch_size({ppo.rollout_micro_batch_size})",
        )


def _check_addresses(cfg: PpoConfig, key: str) -> None:
    remote = cfg.actor.remote_critic_rm
    if remote.combine_rm_and_critic_server != cfg.combined:
        raise config_fault(
            f"{key}.actor.remote_critic_rm.combine_rm_and_critic_server",
            remote.combine_rm_and_critic_server,
            f"must match critic.trainer.ppo.combine_rm_and_critic_server({cfg.combined}): the actor asks for rewards "
            "where the reward model is served",
        )
    served = {CRITIC: ("critic.trainer.ppo.port", cfg.critic.trainer.ppo.port)}
    if not cfg.combined:
        served[REWARD_MODEL] = ("reward_model.port", cfg.reward_model.port)
    if cfg.initial_policy.serve:
        served[INITIAL_POLICY] = ("initial_policy.port", cfg.initial_policy.port)
    taken: dict[int, str] = {}
    for role, (name, port) in served.items():
        if not _PORTS[0] <= port <= _PORTS[1]:
            raise config_fault(f"{key}.{name}", port, f"choose a port in [{_PORTS[0]}, {_PORTS[1]}]")
        if port in taken:
            raise config_fault(
                f"{key}.{name}",
                port,
                f"is also {taken[port]}: roles may share a host (the interactive backend runs them all on this one), "
                "so give each its own port",
            )
        taken[port] = name
        asked = getattr(remote, role).port
        if asked != port:
            raise config_fault(
                f"{key}.actor.remote_critic_rm.{role}.port",
                asked,
                f"must equal {name}({port}), where the {role} role listens",
            )


def _check_critic_schedule(cfg: PpoConfig, key: str) -> None:
    """The critic's cosine schedule spans critic.trainer.ppo.max_steps and needs a step of decay in it."""
    sched, steps = cfg.critic.model.optim.sched, cfg.critic.trainer.ppo.max_steps
    if sched.warmup_steps + sched.constant_steps >= steps:
        raise config_fault(
            f"{key}.critic.model.optim.sched.warmup_steps",
            sched.warmup_steps,
            f"warmup_steps({sched.warmup_steps}) + constant_steps({sched.constant_steps}) must be below "
            f"critic.trainer.ppo.max_steps({steps}) to leave a step of cosine decay; lower them or raise max_steps",
        )


def _check_runnable(cfg: PpoConfig, key: str, dp: dict[str, int]) -> None:
    """What the role programs cannot run, refused here so that the launcher refuses it too."""
    if dp[ACTOR] > 1:
        tp = cfg.actor.model.tensor_model_parallel_size
        raise config_fault(
            f"{key}.actor.trainer.devices",
            cfg.actor.trainer.devices,
            f"the actor would run {dp[ACTOR]} data-parallel copies, and it does not split rollouts over copies: set "
            f"trainer.num_nodes({cfg.actor.trainer.num_nodes}) x trainer.devices to the tensor-parallel size ({tp})",
        )
    for role in (ACTOR, CRITIC):
        trainer = cfg.role_trainer(role)
        if trainer.precision_name() == "fp16":
            raise config_fault(
                f"{key}.{role}.trainer.precision",
                trainer.precision,
                "fp16 training would need loss scaling, which the PPO roles do not do; use bf16 or 32",
            )
