"""A stage reads its own config section, validates it and returns job specs. One subclass per stage kind.

A stage knows its kind's job shape (one job of trainer.num_nodes x trainer.devices processes, of run.nodes x
run.ntasks_per_node, or one task) and nothing about model families: which program runs and which schema binds the
section come from the family's row (launch/families.py), and the bound config answers the rest: `run`, `reads()`,
`writes()`, and for stages with a preparation step `preparation_args(config_file)`.
"""

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue, OmegaConfBaseException

from ...contract.binding import JobConfigError
from ...contract.model_facts import ModelFacts
from ..context import LaunchContext
from ..errors import ConfigError, config_error
from ..families import Family, family_for, program_for, schema_for
from ..job_spec import Command, Dependency, JobSpec
from ..job_start import WaitingBinding, bind_waiting
from ..predictions import predict
from .run_dependency import parse_run_dependency, time_limit


def positive_int(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error(key, value, "must be a positive integer")
    return value


def load_schema(path: str):
    """`module:Class` -> the class; schemas are imported on use, so a run pays only for the stages it lists."""
    import importlib

    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def dump_config(config: dict[str, Any]) -> str:
    # libyaml's emitter when present: the pure-Python one costs more than the rest of a dry run's own work.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(config, Dumper=dumper, sort_keys=False, default_flow_style=False, width=120)


class Stage(ABC):
    kind: ClassVar[str] = ""

    def __init__(self, context: LaunchContext, root: DictConfig, choice: str):
        self.context = context
        self.root = root
        self.choice = choice
        self.waiting: WaitingBinding | None = None  # set by bind() when a node count waits for the job start

    def key(self, *parts: str) -> str:
        return ".".join((self.kind,) + parts)

    def check_divisors(self, *keys: str) -> None:
        """Positive-integer checks on values other keys divide by (run.nodes = ceil(TP x PP / GPUs), ...), made
        before resolving, so that a 0 is reported as itself and not as a division by zero in a resolver."""
        for key in keys:
            positive_int(self.key(key), OmegaConf.select(self.root, self.key(key), default=1))

    def resolved(self) -> dict[str, Any]:
        """This stage's section with every ${...} resolved; a missing `???` value is a ConfigError naming its key."""
        section = self.root[self.kind]
        try:
            return OmegaConf.to_container(section, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as error:
            raise config_error(
                self._full_key(error), "???", "this value is mandatory: set it in the YAML or on the command line"
            ) from None
        except InterpolationResolutionError as error:
            raise ConfigError(
                f"{self._full_key(error)}: cannot resolve an interpolation ({error.msg.splitlines()[0]})"
            ) from None
        except OmegaConfBaseException as error:
            raise ConfigError(f"{self._full_key(error)}: {error.msg.splitlines()[0]}") from None

    def _full_key(self, error: OmegaConfBaseException) -> str:
        key = getattr(error, "full_key", None) or "?"
        return key if key.startswith(self.kind) else f"{self.kind}.{key}"

    def bind_family(self) -> tuple[Family, str, dict[str, Any], Any]:
        """(family, job program, resolved section, bound config) of a stage whose config choice names its family:
        the family's row says which program runs and which schema the section binds to."""
        family = family_for(self.kind, self.choice)
        program = program_for(family, self.kind, self.choice)
        config, cfg = self.bind(schema_for(family, self.kind))
        return family, program, config, cfg

    def preparation(self, family: Family, cfg) -> tuple[Command, ...]:
        """The family's one-process preparation step, when the bound config asks for one: its schema's
        `preparation_args(config_file)` gives the arguments, or None for nothing to prepare (as for a schema
        without that method: its stage never prepares anything)."""
        prepare = getattr(cfg, "preparation_args", None)
        args = None if prepare is None else prepare(str(self.config_file(cfg.run)))
        if args is None:
            return ()
        return (Command(family.preparers[self.kind], tuple(args), distributed=False),)

    def bind(self, schema_path: str) -> tuple[dict[str, Any], Any]:
        """(resolved section, the section bound to its job program's schema). Every rule of the schema is
        checked here, before anything is written: the job binds the same file to the same schema when it starts."""
        config = self.resolved()
        schema = load_schema(schema_path)
        try:
            self.waiting = bind_waiting(schema, config, self.kind, self.context.cluster_type)
            if self.waiting is not None:
                return config, self.waiting.bound
            return config, schema.from_dict(config, self.kind)
        except JobConfigError as error:
            raise ConfigError(str(error)) from None

    def bind_section(self, schema, section: dict[str, Any], stage: str):
        """A section this stage derived for another program of its job, bound as that program binds it."""
        try:
            return schema.from_dict(section, stage)
        except JobConfigError as error:
            raise ConfigError(f"{self.kind} (the {stage} this job runs first): {error}") from None

    def node_count(self, key: str, bound: int):
        """The job's node count from `key` (e.g. trainer.num_nodes): the bound number, or the reference to the
        number the job gets when it starts (job_start.py)."""
        return self.waiting.waiting.get(self.key(key), bound) if self.waiting is not None else bound

    def performance_of(self, config: dict[str, Any], cfg) -> dict[str, Any]:
        """The job spec fields of a training-like job's predicted performance (refused here when it is predicted
        not to fit in its GPUs' memory) and of where it writes what it measured."""
        return {
            "prediction": predict(self.kind, config, self.context),
            "measured_steps_dir": Path(cfg.exp_manager.explicit_log_dir),
        }

    def with_loaded_model(self, specs: list[JobSpec], facts: ModelFacts | None) -> list[JobSpec]:
        """The stage's jobs once the model it loads is known (pipeline.build_plan); most stages need nothing of it."""
        return specs

    @staticmethod
    def files_of(cfg) -> dict[str, Any]:
        """The job spec fields that declare what a job reads and writes, from its bound config."""
        return {"reads": tuple(cfg.reads()), "writes": tuple(str(path) for path in cfg.writes())}

    def config_file(self, run) -> Path:
        """Where the resolved config goes: `<run.results_dir>/<run.name>_hydra.yaml`, beside the script."""
        return Path(run.results_dir) / f"{run.name}_hydra.yaml"

    def program_command(self, program: str, cfg, **options) -> Command:
        """The job program's command: it reads the resolved config this stage writes (`--config <config file>`)."""
        return Command(program, ("--config", str(self.config_file(cfg.run))), **options)

    def run_sized_job(self, config: dict[str, Any], cfg, commands) -> list[JobSpec]:
        """One job of run.nodes x run.ntasks_per_node processes (a stage whose run section sizes its job), declaring
        what the bound config reads and writes."""
        return self.one_job(
            config,
            cfg.run,
            commands,
            nodes=self.node_count("run.nodes", cfg.run.nodes),
            tasks_per_node=cfg.run.ntasks_per_node,
            **self.files_of(cfg),
        )

    def one_job(self, config: dict[str, Any], run, commands, **resources) -> list[JobSpec]:
        """The usual stage: one job in run.results_dir that waits as run.dependency says and writes the config."""
        after_previous, waits = parse_run_dependency(self.key("run", "dependency"), run.dependency)
        config_file = self.config_file(run)
        return [
            JobSpec(
                stage=self.kind,
                name=run.name,
                directory=config_file.parent,
                commands=tuple(commands),
                time_limit=time_limit(run),
                after_previous=after_previous,
                waits=waits,
                files=((config_file, dump_config(config)),),
                notes=(self.waiting.note(),) if self.waiting is not None else (),
                **resources,
            )
        ]

    def step_jobs(self, package: str, config: dict[str, Any], cfg) -> list[JobSpec]:
        """A chain of steps, one job each running `<package>.<step>`, shaped as the bound config's `steps()` plans
        say (contract/schemas/data_preparation.py: StepPlan): an array (one task per item) or a single job. An array
        step after an array step waits per item (AFTER_CORRESPONDING_ITEM) when its plan reads only its own item's
        output; any other step waits for the whole step before (AFTER_SUCCESS). The first job writes the config and
        checks reads."""
        run = cfg.run
        after_previous, waits = parse_run_dependency(self.key("run", "dependency"), run.dependency)
        config_file = self.config_file(run)
        specs: list[JobSpec] = []
        files = self.files_of(cfg)
        for plan in cfg.steps():
            is_array = plan.items is not None
            previous = specs[-1] if specs else None
            specs.append(
                JobSpec(
                    stage=self.kind,
                    name=f"{run.name}_{plan.name}",
                    directory=Path(run.results_dir) / plan.name,
                    # Several tasks of one step each run the program (srun over all tasks, torchrun here);
                    # one task runs it once.
                    commands=(
                        Command(
                            f"{package}.{plan.name}",
                            ("--config", str(config_file)),
                            distributed=plan.tasks_per_node > 1,
                        ),
                    ),
                    time_limit=time_limit(run),
                    tasks_per_node=plan.tasks_per_node,
                    uses_gpus=plan.uses_gpus,
                    gpus_per_node=plan.gpus_per_node if plan.uses_gpus else None,
                    cpus_per_task=plan.cpus_per_task,
                    array_items=tuple(sorted(set(plan.items))) if is_array else None,
                    array_limit=plan.array_limit if is_array else None,
                    array_nodes=plan.bcp_nodes,
                    array_tasks_per_node=plan.bcp_tasks_per_node,
                    # The first step waits for the previous stage; a shard's next step waits for that shard only.
                    after_previous=after_previous
                    if previous is None
                    else (
                        Dependency.AFTER_CORRESPONDING_ITEM
                        if previous.is_array and is_array and plan.per_task
                        else Dependency.AFTER_SUCCESS
                    ),
                    waits=waits,
                    files=((config_file, dump_config(config)),) if previous is None else (),
                    reads=files["reads"] if previous is None else (),
                    writes=files["writes"],
                )
            )
        return specs

    @abstractmethod
    def job_specs(self) -> list[JobSpec]:
        """Validates the section and returns the jobs this stage needs, in submission order."""
