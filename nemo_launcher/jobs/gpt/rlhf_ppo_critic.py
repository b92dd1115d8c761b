"""The critic of rlhf_ppo: a value model initialised from the reward model, trained on the actor's rollouts and
serving their values (and, in the reference's two-role layout, the rewards too).

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_ppo_critic --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_ppo_critic --config ...   (critic.model TP or DP 2)

Binds the whole rlhf_ppo section (contract/schemas/rlhf_ppo.py PpoConfig) and reads its `critic` part: loads
critic.pretrained_checkpoint.restore_from_path (the reward-model .nemo; a plain GPT .nemo gets a fresh head) at
critic.model's tensor-parallel size, listens on critic.trainer.ppo.port (rank 0) and answers, until /shutdown:
    POST /values {"tokens": [[int]]} -> {"values": [[float]]}               entry t: V(tokens[:t+1])
    POST /train {"tokens", "response_start", "returns", "old_values", "step"} -> {"loss": float, ...}
    POST /save {"step": N} -> {"saved": folder}   POST /load {"step": N} -> {"loaded": folder}
    POST /rewards (critic.trainer.ppo.combine_rm_and_critic_server): the frozen reward_model.model.restore_from_path,
        run at the critic's tensor-parallel size and inference micro-batch, with its reward_standardization
The learning (value loss with critic.model.loss_clip_val clipping, ppo_epochs passes in micro-batches, gradient
clipping, AdamW on a cosine schedule over critic.trainer.ppo.max_steps) is jobs/rlhf/critic.py. It writes into
critic.exp_manager.explicit_log_dir: critic_states/step-<N> (the actor's /save), and checkpoints/<name>.nemo every
checkpoint_callback_params.every_n_train_steps critic optimizer steps and at /shutdown (a reward-model .nemo).
Exit codes: 0 after /shutdown, 1 a port in use or a failure, 2 a configuration error, 74 a write that failed for
lack of space or permission, 75 the log directory is in use by another job.
"""

import sys

from ...contract.rlhf_roles import CRITIC
from ...contract.schemas.rlhf_ppo import STAGE
from ..rlhf.servers import run_role

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_ppo_critic"
# bf16/fp16 train under autocast on fp32 weights: AdamW's small updates vanish in 16-bit weights.
AUTOCAST = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


def build(cfg, placement, server):
    import torch

    from ..common.config import JobConfigError
    from ..core.schedule import CosineSchedule
    from ..core.standalone import on_gpu
    from ..rlhf.critic import CriticSettings, ValueTrainer
    from ..rlhf.reward_model import load_scalar_model, save_scalar_model
    from ..rlhf.servers import rewards_handler, values_handler
    from .converter import GPT

    c, gpu = cfg.critic, on_gpu()
    tp = c.model.tensor_model_parallel_size
    model, tokenizer, nemo_config = load_scalar_model(
        GPT,
        c.pretrained_checkpoint.restore_from_path,
        tp,
        "fp32",
        gpu,
        hidden_dropout=c.model.hidden_dropout,
        attention_dropout=c.model.attention_dropout,
    )
    optim, sched = c.model.optim, c.model.optim.sched
    kept = cfg.actor.exp_manager.checkpoint_callback_params.save_top_k
    autocast = AUTOCAST[c.trainer.precision_name()]
    settings = CriticSettings(
        micro_batch_size=c.model.micro_batch_size,
        global_batch_size=c.model.global_batch_size,
        epochs=c.model.ppo_epochs,
        loss_clip=c.model.loss_clip_val,
        gradient_clip=c.trainer.ppo.gradient_clip_val or 0.0,
        weight_decay=optim.weight_decay,
        betas=(optim.betas[0], optim.betas[1]),
        schedule=CosineSchedule(
            optim.lr, sched.min_lr, sched.warmup_steps, sched.constant_steps, c.trainer.ppo.max_steps
        ),
        seed=c.model.seed,
        # The actor resumes from one of its newest save_top_k states and asks for the critic's of the same step; one
        # more covers a critic state saved just before the actor's own save was cut short.
        keep=kept + 1 if kept > 0 else 1_000_000,
        autocast_dtype=None if autocast is None else getattr(torch, autocast),
    )
    trainer = ValueTrainer(model, settings, c.exp_manager.explicit_log_dir, tokenizer.vocab_size)
    nemo_path = c.exp_manager.nemo_path()
    every = c.exp_manager.checkpoint_callback_params.every_n_train_steps

    def write_nemo() -> str:
        save_scalar_model(model, nemo_config, nemo_path, STAGE, placement)
        return nemo_path

    def train(payload: dict) -> dict:
        before = trainer.optimizer_steps // every
        answer = trainer.train(payload)
        if trainer.optimizer_steps // every > before:  # the seed's checkpoint interval, in critic optimizer steps
            answer["nemo"] = write_nemo()
        return answer

    def step_of(payload: dict) -> int:
        from ..rlhf.remote import RequestError

        step = payload.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise RequestError(f"'step' must be the actor's PPO step (an integer >= 0), got {step!r}")
        return step

    micro_batch = c.trainer.ppo.inference_micro_batch_size
    server.handlers.update(
        values=values_handler(model, tokenizer.vocab_size, micro_batch),
        train=train,
        save=lambda payload: {"saved": trainer.save(step_of(payload))},
        load=lambda payload: {"loaded": trainer.load(step_of(payload))},
    )
    if cfg.combined:
        path = cfg.reward_model.model.restore_from_path
        reward, reward_tokenizer, _ = load_scalar_model(GPT, path, tp, c.trainer.precision_name(), gpu)
        if reward_tokenizer.vocab_size != tokenizer.vocab_size:
            raise JobConfigError(
                f"{STAGE}.reward_model.model.restore_from_path={path!r}: its vocabulary ({reward_tokenizer.vocab_size}"
                f" tokens) differs from the critic's ({tokenizer.vocab_size}); use the reward model the critic was "
                "initialised from"
            )
        shift, scale = cfg.reward_model.model.reward_standardization.shift_and_scale()
        server.handlers["rewards"] = rewards_handler(reward, tokenizer.vocab_size, micro_batch, shift, scale)
    server.info["vocab_size"] = tokenizer.vocab_size
    if placement.rank == 0:
        print(f"critic: {c.pretrained_checkpoint.restore_from_path} (TP={tp})", flush=True)
        if cfg.combined:
            print(f"critic: serving rewards of {cfg.reward_model.model.restore_from_path}", flush=True)
    return lambda: {"saved": write_nemo()}


def main(argv=None) -> int:
    return run_role(argv, PROG, CRITIC, build, run_dir=lambda cfg: cfg.critic.exp_manager.explicit_log_dir)


if __name__ == "__main__":
    sys.exit(main())
