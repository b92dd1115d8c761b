"""RLHF stages: a reward model, PPO as cooperating roles in one heterogeneous job, DPO, and their evaluation.

    python3 main.py stages=[rlhf_rm] rlhf_rm=gpt3/2b_rm              # reward model from an SFT .nemo, pairwise loss
    python3 main.py stages=[rlhf_ppo] rlhf_ppo=gpt3/2b_ppo           # PPO: reward model, initial policy, critic, actor
    python3 main.py stages=[rlhf_dpo] rlhf_dpo=gpt3/2b_dpo           # DPO: reference log-probs once, then one model
    python3 main.py stages=[rlhf_eval] rlhf_eval=gpt3/tiny           # a policy's reward and preference accuracy

The reward model and DPO tune a `.nemo` in the fine-tuning job layout (trainer.num_nodes x trainer.devices processes
on the trainer core: exact resume, stop signals, self-requeue). DPO first runs its reference job: one pass of the
frozen reference over the pairs, stored beside them, so the DPO job holds one model. PPO is one job of groups, one per
role (the schema's roles(): the seed's reward-model server, initial-policy server, critic and actor; or the
reference's two, the critic hosting the reward model): each group runs its role's program on nodes of its own, finds
the others' hosts in the variables the job exports, and the first role to end ends the job with its exit status.
"""

from datetime import timedelta
from pathlib import Path

from ...contract import RESUME_MARKER
from ..families import family_for, program_for, schema_for
from ..job_spec import Command, Dependency, JobGroup, JobSpec
from .base import Stage, dump_config
from .fine_tuning import FineTuningStage
from .run_dependency import parse_run_dependency, time_limit


class RewardModelStage(FineTuningStage):
    """The reward-model stage: the SFT model with a scalar head, trained on comparison pairs with the pairwise loss."""

    kind = "rlhf_rm"


class DpoStage(FineTuningStage):
    """The DPO stage: the frozen reference's log-probabilities of the pairs written once, then the policy trained."""

    kind = "rlhf_dpo"

    def job_specs(self) -> list[JobSpec]:
        """The reference job (the frozen model's log-probabilities of every pair, written once), then the DPO job;
        both read the one config file the first writes, and run as many processes as the trainer asks."""
        dpo = super().job_specs()[0]
        family = family_for(self.kind, self.choice)
        cfg = self.bound
        config_file = self.config_file(cfg.run)
        reference = JobSpec(
            stage=self.kind,
            name=f"{cfg.run.name}_reference",
            directory=config_file.parent / "reference_job",
            commands=(self.program_command(program_for(family, "rlhf_dpo_reference", self.choice), cfg),),
            time_limit=dpo.time_limit,
            nodes=dpo.nodes,
            tasks_per_node=dpo.tasks_per_node,
            after_previous=dpo.after_previous,
            waits=dpo.waits,
            env=dpo.env,
            files=dpo.files,
            reads=tuple(cfg.reference_reads()),
            writes=tuple(str(path) for path in cfg.reference_writes()),
            notes=dpo.notes,
        )
        trainer = _replace(dpo, files=(), waits=_own_waits(dpo), after_previous=Dependency.AFTER_SUCCESS)
        return [_replace(reference, prediction=None, measured_steps_dir=None), trainer]

    def with_loaded_model(self, specs: list[JobSpec], facts) -> list[JobSpec]:
        """Only the DPO job trains: the reference job's one forward pass is not what the performance model counts."""
        *before, trainer = specs
        return before + super().with_loaded_model([trainer], facts)


class PpoStage(Stage):
    """The PPO stage: reward model, initial policy, critic and actor as the groups of one heterogeneous job."""

    kind = "rlhf_ppo"

    def job_specs(self) -> list[JobSpec]:
        family = family_for(self.kind, self.choice)
        config, cfg = self.bind(schema_for(family, self.kind))
        run = cfg.run
        after_previous, waits = parse_run_dependency(self.key("run", "dependency"), run.dependency)
        config_file = self.config_file(run)
        groups = tuple(
            JobGroup(
                name=role.name,
                command=Command(program_for(family, role.program_kind, self.choice), ("--config", str(config_file))),
                nodes=role.nodes,
                tasks_per_node=role.devices,
                host_variable=role.host_variable,
            )
            for role in cfg.roles()
        )
        return [
            JobSpec.heterogeneous(
                groups,
                stage=self.kind,
                name=run.name,
                directory=config_file.parent,
                time_limit=time_limit(run),
                after_previous=after_previous,
                waits=waits,
                files=((config_file, dump_config(config)),),
                checkpoint_signal=True,
                # The actor stops early (time limit, stop signal) after saving, leaving this marker: the job is queued
                # again and every role resumes from the actor's newest step.
                requeue_marker=Path(cfg.actor_log_dir()) / RESUME_MARKER,
                stop_grace=timedelta(seconds=run.monitor_grace_s),
                driver_group="actor",  # it shuts the servers down when it is done: its status is the job's
                notes=(_groups_note(run.name, groups),),
                **self.files_of(cfg),
            )
        ]


class RlhfEvalStage(Stage):
    """The RLHF evaluation stage: a policy's mean reward and KL, the reward model's and its preference accuracy."""

    kind = "rlhf_eval"

    def job_specs(self) -> list[JobSpec]:
        family, program, config, cfg = self.bind_family()
        return self.one_job(
            config,
            cfg.run,
            (self.program_command(program, cfg),),
            nodes=1,
            tasks_per_node=1,
            uses_gpus=cfg.trainer.accelerator != "cpu",
            **self.files_of(cfg),
        )


def _groups_note(name: str, groups: tuple[JobGroup, ...]) -> str:
    """What the plan's table cannot show: the job's groups, each with its nodes and processes, in Slurm's order."""
    sizes = ", ".join(f"{group.name} {group.nodes}x{group.tasks_per_node}" for group in groups)
    return f"rlhf_ppo job {name}: one heterogeneous job of {len(groups)} groups (nodes x processes): {sizes}"


def _replace(spec: JobSpec, **changes) -> JobSpec:
    import dataclasses

    return dataclasses.replace(spec, **changes)


def _own_waits(spec: JobSpec):
    """The DPO job waits for its reference job (the job before it); a singleton wait it keeps, outside jobs the
    reference job has waited for already."""
    return tuple(wait for wait in spec.waits if not wait.job_ids)
