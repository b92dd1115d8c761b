"""The PPO actor's loop: rollouts, rewards with the KL penalty, GAE, the clipped policy update, the critic's training,
validation, checkpoints and exact resume. The GPT program (jobs/gpt/rlhf_ppo_actor.py) loads the policy, binds the
config into PpoSettings and connects the roles; this module knows no family.

    actor = PpoActor(settings, policy, optimizer, train_prompts, val_prompts, roles, log_dir, say=print)
    history = actor.run()           # resumes from the newest complete save; returns every step's metrics

One PPO step N (1-based):
 1. prompts: num_rollout_samples of them, from position (N-1) x num_rollout_samples of the seeded order;
 2. responses sampled from the policy (a generator seeded from the seed and N), and their log-probabilities;
 3. the reward model's score of each response, the initial policy's log-probabilities, the critic's values;
 4. per-token rewards -kl_penalty x KL (+ the score on the last token), GAE, returns = advantages + values,
    advantages whitened when normalize_advantages;
 5. the critic trains on the returns (/train), the policy for `epochs` passes over the rollouts in shuffled
    micro-batches (a generator seeded from the seed, N and the pass): clipped ratio, entropy bonus, gradient clipping.
Then validation every val_check_interval steps (and before step 1: the curve's first point), a save every
save_interval steps and at the last one, or at once on SIGTERM/SIGUSR1 or when trainer.max_time leaves no room for
another step (then the run stops, exit 0, and the launcher's script requeues it while RESUME_MARKER exists).

Exact resume: every random draw comes from a generator seeded by (seed, step, purpose), the prompt position is the
step times the batch, and a save holds the policy, the optimizer, the step, the metrics so far and every global RNG
state. The critic saves its own state for the same step first (/save N), and a resumed actor asks it to load that
step (/load N): a run killed anywhere (kill -9 included) and rerun with all its roles continues exactly as if it had
never stopped.
"""

import contextlib
import json
import math
import random
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ...contract import RESUME_MARKER
from ..common.config import JobConfigError
from . import actor_state, ppo
from .actor_parallel import Parallel, gradient_norm
from .actor_roles import ActorRoles
from .parallel_grads import tensor_parallel_shards
from .prompts import Prompt, PromptOrder
from .rollouts import RolloutBatch, TokenSampler, generate, per_response, response_logprobs, step_generator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
METRICS_FILE = "ppo_metrics.jsonl"


@dataclass(frozen=True)
class PpoSettings:
    """The actor's knobs, read off the rlhf_ppo config by the program (names there in brackets)."""

    seed: int
    max_steps: int  # PPO steps (actor.trainer.ppo.max_steps)
    rollouts_per_step: int  # prompts sampled per step (ppo.num_rollout_samples)
    rollout_micro_batch_size: int  # prompts generated together (ppo.rollout_micro_batch_size)
    forward_micro_batch_size: int  # sequences per log-prob forward pass (ppo.forward_micro_batch_size)
    val_samples: int  # validation rollouts, the first of the validation prompts (ppo.num_val_samples)
    val_micro_batch_size: int  # validation prompts generated together (ppo.val_rollout_micro_batch_size)
    train_global_batch_size: int  # rollouts per optimizer step (actor.model.global_batch_size)
    train_micro_batch_size: int  # rollouts per forward/backward (actor.model.micro_batch_size)
    epochs: int  # passes over a step's rollouts (ppo.epochs)
    kl_penalty: float  # (ppo.initial_policy_kl_penalty)
    absolute_kl: bool  # (ppo.use_absolute_kl)
    discount: float  # (ppo.discount_factor)
    gae_lambda: float  # (ppo.gae_lambda)
    normalize_advantages: bool  # (ppo.normalize_advantages)
    ratio_eps: float  # clip range of the probability ratio (ppo.ratio_eps)
    entropy_bonus: float  # weight of the entropy added to the objective (ppo.entropy_bonus)
    gradient_clip: float  # max global gradient norm; 0 = off (actor.trainer.ppo.gradient_clip_val)
    sampler: TokenSampler  # rollouts and validation (sampling_params)
    max_new_tokens: int  # (length_params.max_length)
    min_new_tokens: int  # (length_params.min_length)
    max_prompt_length: int  # longer prompts keep their last tokens (data.max_prompt_length)
    val_check_interval: int  # steps between validations (actor.trainer.ppo.val_check_interval)
    save_interval: int  # steps between saves (actor.trainer.ppo.save_interval)
    stop_id: int  # the tokenizer's eod
    vocab_size: int  # the tokenizer's (padding rows of the embedding are never sampled)


class PpoActor:
    def __init__(
        self,
        settings: PpoSettings,
        policy: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        train_prompts: list[Prompt],
        val_prompts: list[Prompt],
        roles: ActorRoles,
        log_dir: str,
        say: Callable[[str], None],
        parallel: Parallel | None = None,
        state_rank: int = 0,
        state_writer: bool = True,
        tensorboard=None,
        learning_rate: Callable[[int], float] | None = None,
        keep: int = actor_state.KEEP,
        resume: bool = True,
        max_time_s: float | None = None,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        started: float | None = None,
    ):
        self.settings, self.policy, self.optimizer = settings, policy, optimizer
        self.train_prompts, self.val_prompts = train_prompts, val_prompts
        self.roles, self.log_dir, self.say = roles, Path(log_dir), say
        self.parallel = parallel or Parallel()
        self.state_rank, self.state_writer = state_rank, state_writer
        self.tensorboard = tensorboard
        self.learning_rate, self.keep, self.resume, self.max_time_s = learning_rate, keep, resume, max_time_s
        self.autocast = autocast
        self.started = time.monotonic() if started is None else started  # max_time counts from the job's start
        self.order = PromptOrder(len(train_prompts), settings.seed)
        self.history: list[dict] = []
        self.step = 0
        self._stop_signal: int | None = None
        # Which weights are tensor-parallel shards, read from the layer types (a model loaded from a .nemo lacks
        # megatron's flag on them: TP=2 measured a norm of 1.00 where TP=1 had 1.95).
        self.sharded = tensor_parallel_shards(policy)
        # No dropout anywhere in the actor: the first update's ratio must be exactly 1 (the rollout's log-probs are
        # the same function), and a deterministic forward keeps reruns bit-identical.
        self.policy.eval()

    # ---- one step -----------------------------------------------------------------------------------------------

    def rollouts(self, prompts: list[list[int]], micro_batch: int, generator: torch.Generator) -> RolloutBatch:
        s = self.settings
        prompts = [ids[-s.max_prompt_length :] for ids in prompts]
        tokens, starts = [], []
        for first in range(0, len(prompts), micro_batch):
            part = prompts[first : first + micro_batch]
            with self.autocast():
                batch = generate(
                    self.policy, part, s.sampler, s.max_new_tokens, s.min_new_tokens, s.stop_id, s.vocab_size, generator
                )
            tokens += batch.tokens
            starts += batch.prompt_lengths
        return RolloutBatch(tokens, starts)

    @torch.no_grad()
    def policy_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """[rollouts, longest response] log-probs of the response tokens under the policy now (micro-batched)."""
        width = batch.response_mask().shape[1]
        out = torch.zeros(len(batch.tokens), width)
        size = self.settings.forward_micro_batch_size
        for first in range(0, len(batch.tokens), size):
            rows = list(range(first, min(first + size, len(batch.tokens))))
            with self.autocast():
                logp, _ = response_logprobs(self.policy, batch.select(rows), self.settings.stop_id)
            out[first : first + len(rows), : logp.shape[1]] = logp.float().cpu()
        return out

    def judge(self, batch: RolloutBatch, with_values: bool) -> dict[str, torch.Tensor]:
        """What the other roles say of a batch: scores [rollouts], reference log-probs and (optionally) values
        [rollouts, longest response]. Rank 0 asks; every rank gets the answers."""

        def ask():
            answers = {
                "scores": self.roles.rewards(batch.tokens),
                "reference": self.roles.reference_logprobs(batch.tokens),
            }
            if with_values:
                answers["values"] = self.roles.values(batch.tokens)
            return answers

        answers = self.parallel.share(ask)
        judged = {
            "scores": torch.tensor(answers["scores"], dtype=torch.float32),
            "reference": per_response(answers["reference"], batch, offset=1),
        }
        if with_values:
            judged["values"] = per_response(answers["values"], batch, offset=1)
        return judged

    def ppo_step(self, step: int) -> dict:
        s = self.settings
        started = time.perf_counter()
        rows = self.order.take((step - 1) * s.rollouts_per_step, s.rollouts_per_step)
        prompts = [self.train_prompts[row].ids for row in rows]
        batch = self.rollouts(prompts, s.rollout_micro_batch_size, step_generator(s.seed, step, "rollouts"))
        mask = batch.response_mask()
        old_logprobs = self.policy_logprobs(batch)
        judged = self.judge(batch, with_values=True)
        kl = ppo.kl_to_reference(old_logprobs, judged["reference"], s.absolute_kl) * mask
        rewards = ppo.token_rewards(kl, mask, judged["scores"], s.kl_penalty)
        advantages, returns = ppo.generalized_advantages(rewards, judged["values"], mask, s.discount, s.gae_lambda)
        if s.normalize_advantages:
            advantages = ppo.normalized(advantages, mask)
        lengths = batch.response_lengths
        critic = self.parallel.share(
            lambda: self.roles.train_critic(
                batch.tokens,
                batch.prompt_lengths,
                [returns[i, :n].tolist() for i, n in enumerate(lengths)],
                [judged["values"][i, :n].tolist() for i, n in enumerate(lengths)],
                step,
            )
        )
        update = self.train_policy(step, batch, old_logprobs, advantages, mask)
        sequence_kl = (ppo.kl_to_reference(old_logprobs, judged["reference"], False) * mask).sum(dim=1)
        return {
            "step": step,
            "reward": float(judged["scores"].mean()),
            "kl": float(sequence_kl.mean()),
            "policy_loss": update["policy_loss"],
            "entropy": update["entropy"],
            "clip_fraction": update["clip_fraction"],
            "grad_norm": update["grad_norm"],
            "critic_loss": float(critic.get("loss", math.nan)),
            "response_length": float(sum(lengths) / len(lengths)),
            "advantage_mean": float(ppo.masked_mean(advantages, mask)),
            "return_mean": float(ppo.masked_mean(returns, mask)),
            "step_time_s": time.perf_counter() - started,
        }

    def train_policy(self, step, batch, old_logprobs, advantages, mask) -> dict:
        s = self.settings
        count = len(batch.tokens)
        parameters = [p for p in self.policy.parameters() if p.requires_grad]
        losses, entropies, clips, norms = [], [], [], []
        updates_per_step = s.epochs * -(-count // s.train_global_batch_size)
        update = (step - 1) * updates_per_step  # optimizer steps taken before this PPO step: the schedule's position
        for epoch in range(s.epochs):
            order = torch.randperm(count, generator=step_generator(s.seed, step, f"epoch-{epoch}")).tolist()
            for first in range(0, count, s.train_global_batch_size):
                rows_of_step = order[first : first + s.train_global_batch_size]
                micro = [
                    rows_of_step[i : i + s.train_micro_batch_size]
                    for i in range(0, len(rows_of_step), s.train_micro_batch_size)
                ]
                self.optimizer.zero_grad(set_to_none=True)
                if self.learning_rate is not None:
                    for group in self.optimizer.param_groups:
                        group["lr"] = self.learning_rate(update)
                update += 1
                for rows in micro:
                    part = batch.select(rows)
                    part_mask = part.response_mask()
                    width = part_mask.shape[1]
                    with self.autocast():
                        logp, logits = response_logprobs(self.policy, part, s.stop_id)
                    loss, clipped = ppo.clipped_policy_loss(
                        logp.float().cpu(),
                        old_logprobs[rows, :width],
                        advantages[rows, :width],
                        part_mask,
                        s.ratio_eps,
                    )
                    entropy = ppo.masked_mean(ppo.token_entropy(logits).cpu(), part_mask)
                    objective = (loss - s.entropy_bonus * entropy) / len(micro)
                    objective.backward()
                    losses.append(float(loss.detach()))
                    entropies.append(float(entropy.detach()))
                    clips.append(float(clipped))
                norm = gradient_norm(parameters, self.sharded)
                if s.gradient_clip > 0 and float(norm) > s.gradient_clip:
                    scale = s.gradient_clip / (float(norm) + 1e-6)
                    for parameter in parameters:
                        if parameter.grad is not None:
                            parameter.grad.mul_(scale)
                norms.append(float(norm))
                self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "policy_loss": sum(losses) / len(losses),
            "entropy": sum(entropies) / len(entropies),
            "clip_fraction": sum(clips) / len(clips),
            "grad_norm": sum(norms) / len(norms),
        }

    def validate(self, step: int) -> dict:
        s = self.settings
        prompts = [self.val_prompts[i % len(self.val_prompts)].ids for i in range(s.val_samples)]
        # The same draws at every validation (common random numbers): the curve moves with the policy, not the dice.
        batch = self.rollouts(prompts, s.val_micro_batch_size, step_generator(s.seed, 0, "validation"))
        mask = batch.response_mask()
        logprobs = self.policy_logprobs(batch)
        judged = self.judge(batch, with_values=False)
        sequence_kl = (ppo.kl_to_reference(logprobs, judged["reference"], False) * mask).sum(dim=1)
        lengths = batch.response_lengths
        return {
            "val_global_rewards": float(judged["scores"].mean()),
            "val_kl": float(sequence_kl.mean()),
            "val_response_length": float(sum(lengths) / len(lengths)),
        }

    # ---- the run ------------------------------------------------------------------------------------------------

    def run(self) -> list[dict]:
        s = self.settings
        self._resume()
        # This attempt runs: a crash from here on must not requeue the job (an earlier stop's marker would).
        self._mark_resume(False)
        previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._note_stop)
        try:
            if self.step == 0:
                record = {"step": 0, **self.validate(0)}
                self._record(record)
            while self.step < s.max_steps:
                step = self.step + 1
                record = self.ppo_step(step)
                if step % s.val_check_interval == 0 or step == s.max_steps:
                    record.update(self.validate(step))
                self.step = step
                self._record(record)
                stopping = self.parallel.any(self._stop_signal is not None)
                if not stopping and self._out_of_time(record["step_time_s"]):
                    stopping = True
                    self.say(f"trainer.max_time ({self.max_time_s:.0f} s) leaves no room for another step")
                if step % s.save_interval == 0 or step == s.max_steps or stopping:
                    self.save()
                if stopping and step < s.max_steps:
                    self._mark_resume(True)
                    self.say(f"stopped after step {step} with its state saved; a rerun resumes from it")
                    return self.history
            self._mark_resume(False)
            return self.history
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _out_of_time(self, step_time_s: float) -> bool:
        """Whether another step (taken to last 1.5 times the one just done) would end past trainer.max_time."""
        if self.max_time_s is None:
            return False
        late = time.monotonic() - self.started + 1.5 * step_time_s > self.max_time_s
        return self.parallel.any(late)

    @property
    def stopped_early(self) -> bool:
        return self.step < self.settings.max_steps

    def _note_stop(self, signum, frame) -> None:
        # The step in flight finishes (its critic update is already sent); the save comes after it.
        self._stop_signal = signum
        self.say(f"signal {signal.Signals(signum).name}: saving after this step, then stopping")

    def _record(self, record: dict) -> None:
        self.history.append(record)
        if self.parallel.rank != 0:
            return
        with open(self.log_dir / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, float) and math.isfinite(value):
                    self.tensorboard.add_scalar(key, value, record["step"])
            self.tensorboard.flush()
        self.say(progress_line(record, self.settings.max_steps))

    def save(self) -> None:
        """Critic first, then the actor's own state; the step counts as saved once the actor's marker exists."""
        step = self.step
        saved = self.parallel.share(lambda: self.roles.save_critic(step))
        state = {
            "step": step,
            "prompt_position": step * self.settings.rollouts_per_step,
            "settings": asdict(self.settings),
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "history": self.history,
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "python": random.getstate(),
            },
        }
        actor_state.save_actor_state(self.log_dir, step, state, self.state_rank, self.state_writer)
        self.parallel.barrier()
        if self.parallel.rank == 0:
            actor_state.mark_complete(self.log_dir, step, self.keep)
        self.parallel.barrier()
        self.say(f"saved step {step}: {actor_state.step_folder(self.log_dir, step)} (critic: {saved})")

    def _resume(self) -> None:
        found = actor_state.newest_actor_state(self.log_dir) if self.resume else None
        if found is None:
            if self.parallel.rank == 0:
                (self.log_dir / METRICS_FILE).unlink(missing_ok=True)
            self.say("starting from the SFT policy (no PPO state saved in this run yet)")
            return
        step, folder = found
        state = actor_state.load_actor_state(folder, self.state_rank)
        expected = step * self.settings.rollouts_per_step
        if state["prompt_position"] != expected:
            saved = state["settings"]["rollouts_per_step"]
            raise JobConfigError(
                f"rlhf_ppo.actor.model.ppo.num_rollout_samples={self.settings.rollouts_per_step}: the state in "
                f"{folder} was saved with {saved}; set it back to resume, or start in a new explicit_log_dir"
            )
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        random.setstate(state["rng"]["python"])
        self.history = list(state["history"])
        self.step = step
        loaded = self.parallel.share(lambda: self.roles.load_critic(step))
        if self.parallel.rank == 0:
            with open(self.log_dir / METRICS_FILE, "w") as handle:
                handle.writelines(json.dumps(record) + "\n" for record in self.history)
        self.say(f"resumed from step {step}: {folder} (critic: {loaded})")

    def _mark_resume(self, needed: bool) -> None:
        if self.parallel.rank != 0:
            return
        marker = self.log_dir / RESUME_MARKER
        if needed:
            marker.write_text("the PPO actor stopped on a signal after saving; the next attempt resumes\n")
        else:
            marker.unlink(missing_ok=True)


def progress_line(record: dict, max_steps: int) -> str:
    parts = [f"ppo step {record['step']}/{max_steps}"]
    for key, label in (
        ("reward", "reward"),
        ("kl", "kl"),
        ("policy_loss", "policy loss"),
        ("critic_loss", "critic loss"),
        ("entropy", "entropy"),
        ("response_length", "length"),
        ("val_global_rewards", "val reward"),
        ("val_kl", "val kl"),
    ):
        if key in record:
            parts.append(f"{label} {record[key]:.4f}")
    if "step_time_s" in record:
        parts.append(f"{record['step_time_s']:.1f} s")
    return " | ".join(parts)
