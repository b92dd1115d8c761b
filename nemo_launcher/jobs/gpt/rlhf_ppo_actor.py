"""The PPO actor of rlhf_ppo: trains the policy (a GPT from the SFT .nemo) and drives the other roles.

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_ppo_actor --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_ppo_actor --config ...   (actor.model TP=2)

Binds the whole rlhf_ppo section (contract/schemas/rlhf_ppo.py PpoConfig) and reads its `actor` part. Waits up to
run.server_wait_s for the reward model, the initial policy (unless initial_policy.serve is false: the actor then keeps
a frozen copy of its starting weights) and the critic, then runs the PPO loop (jobs/rlhf/actor_loop.py). Writes into
actor.exp_manager.explicit_log_dir: ppo_checkpoints/step-<N> (exact resume), ppo_metrics.jsonl and TensorBoard
events (per step: reward, KL to the initial policy, policy and critic losses, entropy, response length; per
validation: val_global_rewards, val_kl), and at the end checkpoints/<exp_manager.name>.nemo, a plain GPT .nemo that
conversion and evaluation read. Then it prints a summary, asks every server to /shutdown and exits 0.

Exit codes: 0 done, or stopped on SIGTERM/SIGUSR1 or at trainer.max_time after saving (RESUME_NEEDED tells the Slurm
script to requeue); 1 a role that does not answer (the message names it); 2 a configuration error; 74 a write that
failed for lack of space or permission; 75 the run directory is in use by another job.
"""

import dataclasses
import os
import sys
import time
from pathlib import Path

from ...contract.rlhf_roles import ACTOR, CRITIC, INITIAL_POLICY, REWARD_MODEL
from ...contract.schemas.rlhf_ppo import PpoConfig

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_ppo_actor"
STAGE = "rlhf_ppo"


def main(argv=None) -> int:
    from ..common.config import JobConfigError
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed_run

    try:
        with claimed_run(argv, PROG, lambda section: PpoConfig.from_dict(section, STAGE), PpoConfig.actor_log_dir) as (
            cfg,
            placement,
        ):
            return run_actor(cfg, placement)
    except (JobConfigError, JobFault) as error:
        return print_error(error)


def run_actor(cfg: PpoConfig, placement) -> int:
    import torch

    from ..rlhf.actor_loop import Parallel, PpoActor
    from ..tuning.tuned_files import save_model

    started = time.monotonic()  # trainer.max_time counts from here
    actor = cfg.actor
    # The processes started must be the trainer section's; the schema refuses data-parallel copies of the actor and
    # fp16 (no loss scaling here), so these are TP ranks of one policy in fp32 or bf16.
    cfg.role_data_parallel_size(ACTOR, placement.world_size)
    precision = actor.trainer.precision_name()
    log_dir = Path(actor.exp_manager.explicit_log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    # A rerun must repeat the run exactly (kill -9, then resume): deterministic kernels, and on a GPU the cuBLAS
    # workspace setting they need, set before the model's first CUDA call.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)

    policy, tokenizer, nemo_config, reference = _load_policy(cfg)
    say = _sayer(placement.rank)
    prompts = _prompts(cfg, tokenizer.vocab_size)
    settings = _settings(cfg, tokenizer, len(prompts["train"]))
    roles = _roles(cfg, reference, tokenizer.eod)
    optimizer, schedule = _optimizer(cfg, policy, settings)
    tensorboard = None
    if actor.exp_manager.create_tensorboard_logger and placement.rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        tensorboard = SummaryWriter(log_dir=str(log_dir))
    from megatron.core import parallel_state

    ppo_actor = PpoActor(
        settings,
        policy,
        optimizer,
        prompts["train"],
        prompts["validation"],
        roles,
        str(log_dir),
        say,
        parallel=Parallel(placement.rank, placement.world_size),
        state_rank=parallel_state.get_tensor_model_parallel_rank(),
        state_writer=parallel_state.get_data_parallel_rank() == 0,
        tensorboard=tensorboard,
        learning_rate=schedule,
        keep=actor.exp_manager.checkpoint_callback_params.save_top_k,
        resume=actor.exp_manager.resume_if_exists,
        max_time_s=actor.trainer.max_time_seconds(),
        autocast=_autocast(precision),
        started=started,
    )
    if placement.rank == 0:
        waited = time.perf_counter()
        say(f"waiting up to {cfg.run.server_wait_s} s for {', '.join(c.name for c in roles.servers())}")
        roles.wait_ready(cfg.run.server_wait_s)
        say(f"every role ready after {time.perf_counter() - waited:.1f} s")
    Parallel(placement.rank, placement.world_size).barrier()
    history = ppo_actor.run()
    if tensorboard is not None:
        tensorboard.close()
    if ppo_actor.stopped_early:
        return 0
    nemo_path = actor.exp_manager.nemo_path()
    save_model(policy, nemo_config, nemo_path, STAGE, placement)
    if placement.rank == 0:
        _summary(cfg, history, nemo_path).show()
        roles.shutdown()
    return 0


def _load_policy(cfg: PpoConfig):
    """(policy, tokenizer, the .nemo's model config, frozen reference copy or None) of this rank, from the SFT .nemo
    at the actor's TP. Weights in fp32 whatever the compute precision: the optimizer's small steps need them."""
    from ..core.nemo_archive import read_nemo_config
    from ..core.standalone import load_from_nemo
    from .converter import GPT
    from .inference import inference_section

    model_cfg = cfg.actor.model

    def actor_dropout(model, tp, pp):
        # The actor's own dropout, not the SFT run's: with none (the default), the rollout's log-probs and the
        # update's are the same function.
        return dataclasses.replace(
            inference_section(model, tp, pp),
            hidden_dropout=model_cfg.hidden_dropout,
            attention_dropout=model_cfg.attention_dropout,
        )

    family = dataclasses.replace(GPT, inference_section=actor_dropout)
    path, tp = cfg.actor.pretrained_checkpoint.restore_from_path, model_cfg.tensor_model_parallel_size
    policy, tokenizer = load_from_nemo(family, path, tp, 1, "fp32")
    nemo_config = read_nemo_config(path)
    _check_lengths(cfg, nemo_config)
    reference = None
    if not cfg.initial_policy.serve:
        reference, _ = load_from_nemo(family, path, tp, 1, "fp32")
        reference.requires_grad_(False)
    return policy, tokenizer, nemo_config, reference


def _sayer(rank: int):
    def say(message: str) -> None:
        if rank == 0:
            print(f"actor: {message}", flush=True)

    return say


def _check_lengths(cfg: PpoConfig, nemo_config: dict) -> None:
    """A prompt (cut to max_prompt_length) plus the longest response must fit the model's positions."""
    from ..common.config import JobConfigError

    positions = int(nemo_config.get("max_position_embeddings") or nemo_config.get("encoder_seq_length") or 0)
    data, length = cfg.actor.model.data, cfg.actor.model.ppo.length_params
    if positions and data.max_prompt_length + length.max_length > positions:
        raise JobConfigError(
            f"{STAGE}.actor.model.data.max_prompt_length: {data.max_prompt_length} + "
            f"actor.model.ppo.length_params.max_length({length.max_length}) exceed the model's "
            f"{positions} positions; lower one of them"
        )


def _settings(cfg: PpoConfig, tokenizer, train_prompt_count: int):
    from ..rlhf.actor_loop import PpoSettings
    from ..rlhf.rollouts import TokenSampler

    actor = cfg.actor
    ppo, trainer = actor.model.ppo, actor.trainer.ppo
    sampling = ppo.sampling_params
    sampler = TokenSampler(sampling.temperature, sampling.top_k, sampling.top_p, sampling.use_greedy)
    max_steps = trainer.max_steps
    if max_steps == -1:
        max_steps = max(1, trainer.max_epochs * train_prompt_count // ppo.num_rollout_samples)
    return PpoSettings(
        seed=actor.model.seed,
        max_steps=max_steps,
        rollouts_per_step=ppo.num_rollout_samples,
        rollout_micro_batch_size=ppo.rollout_micro_batch_size,
        forward_micro_batch_size=ppo.forward_batch,
        val_samples=ppo.val_samples,
        val_micro_batch_size=ppo.val_micro_batch,
        train_global_batch_size=actor.model.global_batch_size,
        train_micro_batch_size=actor.model.micro_batch_size,
        epochs=ppo.epochs,
        kl_penalty=trainer.initial_policy_kl_penalty,
        absolute_kl=trainer.use_absolute_kl,
        discount=trainer.discount_factor,
        gae_lambda=trainer.gae_lambda,
        normalize_advantages=trainer.normalize_advantages,
        ratio_eps=ppo.ratio_eps,
        entropy_bonus=ppo.entropy_bonus,
        gradient_clip=trainer.gradient_clip_val or 0.0,
        sampler=sampler,
        max_new_tokens=ppo.length_params.max_length,
        min_new_tokens=ppo.length_params.min_length,
        max_prompt_length=actor.model.data.max_prompt_length,
        val_check_interval=trainer.val_check_interval,
        save_interval=trainer.save_interval,
        stop_id=tokenizer.eod,
        vocab_size=tokenizer.vocab_size,
    )


def _prompts(cfg: PpoConfig, vocab_size: int) -> dict:
    from ..rlhf.prompts import read_prompts

    files = cfg.actor.model.data.data_prefix
    return {
        split: read_prompts(getattr(files, split), vocab_size, f"{STAGE}.actor.model.data.data_prefix.{split}")
        for split in ("train", "validation")
    }


def _roles(cfg: PpoConfig, reference, pad_id: int):
    from ..rlhf.actor_roles import ActorRoles, local_reference_logprobs
    from ..rlhf.remote import RoleClient, role_address

    remote = cfg.actor.remote_critic_rm

    def client(role: str, name: str | None = None) -> RoleClient:
        where = getattr(remote, role)
        host, port = role_address(role, where.ip, where.port)
        return RoleClient(name or role.replace("_", " "), host, port, remote.timeout_s)

    critic = client(CRITIC)
    reward = (
        client(CRITIC, "critic (hosting the reward model)") if cfg.combined else client(REWARD_MODEL, "reward model")
    )
    if cfg.initial_policy.serve:
        return ActorRoles(reward=reward, critic=critic, initial_policy=client(INITIAL_POLICY, "initial policy"))
    return ActorRoles(
        reward=reward,
        critic=critic,
        initial_policy=None,
        local_reference=local_reference_logprobs(reference, pad_id, cfg.actor.model.ppo.forward_batch),
    )


def _optimizer(cfg: PpoConfig, policy, settings):
    """AdamW with decoupled weight decay (not on biases and norm weights, as the trainer core does), the learning
    rate of optimizer step k from the cosine schedule over the run's optimizer steps."""
    import torch

    from ..core.schedule import CosineSchedule

    optim = cfg.actor.model.optim
    decayed, plain = [], []
    for name, parameter in policy.named_parameters():
        (plain if name.endswith(".bias") or "norm" in name or parameter.dim() == 1 else decayed).append(parameter)
    groups = [{"params": decayed, "weight_decay": optim.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), foreach=False)
    updates = settings.max_steps * settings.epochs * (settings.rollouts_per_step // settings.train_global_batch_size)
    sched = optim.sched
    # A schedule with no decay step left (warm-up and constant steps cover the run) holds lr after the warm-up.
    total = max(updates, sched.warmup_steps + sched.constant_steps + 1)
    return optimizer, CosineSchedule(optim.lr, sched.min_lr, sched.warmup_steps, sched.constant_steps, total)


def _autocast(precision: str):
    """The policy's compute precision: bf16 autocast on a GPU; fp32 otherwise (a CPU has no fast bf16 matmul)."""
    import contextlib

    import torch

    if precision == "bf16" and torch.cuda.is_available():
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def _summary(cfg: PpoConfig, history: list[dict], nemo_path: str):
    from ..common.report import Summary

    steps = [record for record in history if record["step"] > 0]
    validations = [record for record in history if "val_global_rewards" in record]
    summary = Summary(f"rlhf_ppo actor: {len(steps)} PPO steps")
    if steps:
        summary.add("reward (train rollouts)", f"{steps[0]['reward']:.4f} -> {steps[-1]['reward']:.4f}")
        summary.add("KL to the initial policy", f"{steps[0]['kl']:.4f} -> {steps[-1]['kl']:.4f}")
    if validations:
        first, last = validations[0], validations[-1]
        summary.add(
            "val_global_rewards",
            f"{first['val_global_rewards']:.4f} (step {first['step']}) -> {last['val_global_rewards']:.4f} "
            f"(step {last['step']})",
        )
        summary.add("val KL", f"{first['val_kl']:.4f} -> {last['val_kl']:.4f}")
    summary.add("policy", nemo_path)
    summary.add("metrics", f"{cfg.actor.exp_manager.explicit_log_dir}/ppo_metrics.jsonl")
    return summary


if __name__ == "__main__":
    sys.exit(main())
