"""The search as launcher jobs: the candidates as one job array, then the analysis job, through the launcher's own
stages, backends and quoting (no shell text is written here).

    search = LauncherConfig.compose(autoconfig_cfg, settings, base)      # conf/config.yaml as main.py composes it
    base_section = search.base_section()                                  # the base config, resolved and bound
    runs = search.bind_candidates(scored, ...)                            # each candidate bound by TrainingStage
    plan = search.plan(runs, manifest)                                    # array (Slurm) or one job (BCP, here)

Each candidate is the family's training stage with the candidate's layout on top of the base config, bound by the
training schema exactly as `python3 main.py stages=[training]` binds it, so a candidate the launcher accepts is one
its job accepts. On Slurm the candidates are one array (task i runs candidate i, all at once) and the analysis job
waits for the whole array with afterany (whatever each task's end). BCP has no arrays and no queue between jobs:
as in the seed, its candidates run one after another in the NGC job, then the analysis; the interactive backend
does the same here. There each candidate runs with --keep-going, so one failure does not stop the others.
"""

import copy
import dataclasses
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ...contract.autoconfig_search import MANIFEST_FILE, CandidateRun, SearchManifest
from ..backends import backend_class
from ..context import read_context
from ..errors import ConfigError, LauncherError
from ..job_spec import Command, Dependency, JobSpec
from ..pipeline import Plan, PlannedJob
from ..resolvers import REPO_ROOT, register_resolvers
from ..stages.training import TrainingStage
from .base_config import BaseConfig
from .grid import Layout
from .scoring import Scored
from .settings import TrainSettings

CANDIDATE_PROGRAM = "nemo_launcher.jobs.autoconfig.candidate"
ANALYSIS_PROGRAM = "nemo_launcher.jobs.autoconfig.analysis"
# Minutes a candidate's job gets beyond max_minutes_per_run: start-up (imports, data index) and the closing summary.
START_AND_END_MINUTES = 10
ANALYSIS_TIME = timedelta(minutes=30)
# The launcher's stage groups with a default choice, besides training (conf/config.yaml's defaults list).
OTHER_STAGE_GROUPS = ("data_preparation", "conversion", "evaluation", "export")
# Cluster keys of the AutoConfigurator's cluster group that the launcher's cluster group takes over.
CLUSTER_KEYS = ("partition", "account", "exclusive", "gpus_per_task", "gpus_per_node", "mem", "job_name_prefix")


@dataclass(frozen=True)
class BoundRun:
    scored: Scored
    run: CandidateRun
    spec: JobSpec  # the candidate's training job as the training stage made it


def _clock(minutes: int) -> str:
    return f"{minutes // 60:d}:{minutes % 60:02d}:00"


def layout_overrides(layout: Layout, gpu: bool, model_keys=None) -> dict[str, Any]:
    """What a candidate sets in the base config (keys under `training`). `model_keys`: the base model section's
    keys; a family without interleaving or context parallelism (T5, BERT) gets neither key at its default."""
    overrides = {
        "model.tensor_model_parallel_size": layout.tp,
        "model.pipeline_model_parallel_size": layout.pp,
        "model.virtual_pipeline_model_parallel_size": layout.vp,
        "model.context_parallel_size": layout.cp,
        "model.micro_batch_size": layout.mbs,
    }
    defaults = {"model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1}
    for key, default in defaults.items():
        if model_keys is not None and key.split(".", 1)[1] not in model_keys and overrides[key] == default:
            del overrides[key]
    if gpu and (model_keys is None or "sequence_parallel" in model_keys):
        overrides["model.sequence_parallel"] = layout.tp > 1  # megatron-core's, on GPUs with TP > 1 (seed configs)
    if layout.act_ckpt_layers:
        overrides["model.activations_checkpoint_granularity"] = "full"
        overrides["model.activations_checkpoint_method"] = "block"
        overrides["model.activations_checkpoint_num_layers"] = layout.act_ckpt_layers
    return overrides


class LauncherConfig:
    """conf/config.yaml composed as main.py composes it, with the search's cluster and paths."""

    def __init__(self, cfg: DictConfig, choice: str, settings: TrainSettings, words: list[str]):
        self.cfg = cfg
        self.choice = choice  # the training config the base config starts from
        self.settings = settings
        self.words = words  # the main.py overrides that give this environment (for the printed command)
        self.context = read_context(cfg)

    @classmethod
    def compose(cls, ac: DictConfig, settings: TrainSettings, base: BaseConfig) -> "LauncherConfig":
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        register_resolvers()
        # `${auto_configurator_path}/..` and the like, written as a user would type them.
        paths = {
            key: os.path.normpath(str(ac[key])) for key in ("launcher_scripts_path", "data_dir", "base_results_dir")
        }
        settings_words = [f"cluster_type={ac.cluster_type}", f"data_dir={paths['data_dir']}"]
        settings_words.append(f"base_results_dir={paths['base_results_dir']}")
        if ac.get("training_container"):
            settings_words.append(f"container={ac.training_container}")
        # The AutoConfigurator runs inside Hydra's own app; composing the launcher's config needs a fresh Hydra.
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            # Only the training group: the search composes no other stage (and composing them costs most of a run).
            others = [f"~{group}" for group in OTHER_STAGE_GROUPS]
            cfg = compose(config_name="config", overrides=["stages=[training]", f"training={base.start}", *others])
        values = {
            "cluster_type": str(ac.cluster_type),
            **paths,
            "container": ac.get("training_container"),
            "container_mounts": OmegaConf.to_container(ac.container_mounts) if ac.get("container_mounts") else [None],
            "wandb_api_key_file": ac.wandb.api_key_file if ac.wandb.enable else None,
        }
        for key, value in values.items():
            OmegaConf.update(cfg, key, value, merge=False)
        for name, value in (ac.get("env_vars") or {}).items():
            OmegaConf.update(cfg, f"env_vars.{name}", value, merge=False, force_add=True)
        for key in CLUSTER_KEYS:
            if key in ac.cluster:
                OmegaConf.update(cfg, f"cluster.{key}", ac.cluster[key], merge=False)
        srun_args = ac.cluster.get("srun_args")
        if srun_args:
            OmegaConf.update(cfg, "cluster.srun_args", list(srun_args), merge=False)
        if "gpu_type" in cfg.get("cluster", {}) and settings.gpu_type != "cpu":
            OmegaConf.update(cfg, "cluster.gpu_type", settings.gpu_type, merge=False)
        if "memory_check" in cfg:
            # The search scored memory itself (scoring.py), with this machine's measured profile on CPUs.
            OmegaConf.update(cfg, "memory_check", False, merge=False)
        for key, value in base.overrides.items():
            OmegaConf.update(cfg, f"training.{key}", value, merge=False)
        if ac.wandb.enable:
            OmegaConf.update(cfg, "training.exp_manager.create_wandb_logger", True, merge=False)
            OmegaConf.update(cfg, "training.exp_manager.wandb_logger_kwargs.project", ac.wandb.project, merge=False)
        return cls(cfg, base.start, settings, settings_words)

    def _stage(self, cfg: DictConfig) -> TrainingStage:
        return TrainingStage(self.context, cfg, self.choice)

    def base_section(self) -> dict[str, Any]:
        """The base config resolved and bound by the training schema (a refusal names the key, exit 2)."""
        stage = self._stage(self.cfg)
        stage.job_specs()
        return stage.resolved()

    def model_keys(self) -> set[str]:
        return set(self.cfg.training.model.keys())

    def fit_batch(self, base: BaseConfig) -> BaseConfig:
        """A start config's global batch that does not split over the search's GPUs (T5 220m's 2048 in micro-batches
        of 64 on 160 GPUs) becomes the nearest multiple of 4 x DP, and its micro-batch the largest one at most as big
        that splits it: the base config must train as it is."""
        model = self.cfg.training.model
        gbs, mbs = int(model.global_batch_size), int(model.micro_batch_size)
        tp, pp = int(model.tensor_model_parallel_size), int(model.pipeline_model_parallel_size)
        data_parallel = max(1, self.settings.gpus // (tp * pp))
        if gbs % (mbs * data_parallel) == 0:
            return base
        step = 4 * data_parallel
        gbs = max(step, round(gbs / step) * step)
        mbs = max(size for size in range(1, mbs + 1) if (gbs // data_parallel) % size == 0)
        fitted = {**base.overrides, "model.global_batch_size": gbs, "model.micro_batch_size": mbs}
        for key in ("model.global_batch_size", "model.micro_batch_size"):
            OmegaConf.update(self.cfg, f"training.{key}", fitted[key], merge=False)
        return dataclasses.replace(base, overrides=fitted)

    def is_gpu(self) -> bool:
        return OmegaConf.select(self.cfg, "training.trainer.accelerator") == "gpu"

    def candidate_cfg(self, name: str, layout: Layout) -> tuple[DictConfig, dict[str, Any]]:
        settings = self.settings
        cfg = copy.deepcopy(self.cfg)
        overrides = layout_overrides(layout, self.is_gpu(), self.model_keys())
        run_values = {
            "run.name": name,
            "run.results_dir": str(settings.logs / "training_logs" / name),
            "run.time_limit": _clock(settings.max_minutes_per_run + START_AND_END_MINUTES),
            "run.dependency": None,
            "run.auto_requeue": False,
            "trainer.max_steps": settings.max_steps_per_run,
            "trainer.max_time": f"00:{_clock(settings.max_minutes_per_run):0>8}",
            # The last logged window (the second half of the run) is the measured one: the first steps warm up.
            "trainer.log_every_n_steps": max(1, settings.max_steps_per_run // 2),
            "trainer.val_check_interval": settings.max_steps_per_run,
            "trainer.limit_val_batches": 1,
            "exp_manager.create_checkpoint_callback": False,
            "exp_manager.resume_if_exists": False,
        }
        if OmegaConf.select(cfg, "training.model.optim.sched.warmup_steps") is not None:
            # A few steps must still be a valid schedule; the learning rate does not change the step time.
            run_values["model.optim.sched.warmup_steps"] = 1
            run_values["model.optim.sched.constant_steps"] = 0
        if OmegaConf.select(cfg, "training.exp_manager.create_wandb_logger"):
            run_values["exp_manager.wandb_logger_kwargs.name"] = name
        for key, value in {**overrides, **run_values}.items():
            OmegaConf.update(cfg, f"training.{key}", value, merge=False)
        return cfg, overrides

    def bind_candidates(self, scored: list[Scored], family: str, label: str, limit: int, nodes) -> tuple[list, list]:
        """The first `limit` candidates the training schema accepts, fastest predicted first; (bound, refused)
        where refused holds (name, the schema's reason) of those it did not."""
        bound: list[BoundRun] = []
        refused: list[tuple[str, str]] = []
        for candidate in scored:
            if len(bound) == limit:
                break
            name = f"{family}_{label}_{nodes}nodes_{candidate.layout.name()}"
            cfg, overrides = self.candidate_cfg(name, candidate.layout)
            try:
                (spec,) = self._stage(cfg).job_specs()
            except ConfigError as error:
                refused.append((name, str(error)))
                continue
            (config_path, _), *_ = spec.files
            (command,) = spec.commands
            layout = candidate.layout
            run = CandidateRun(
                item=len(bound),
                name=name,
                run_dir=str(OmegaConf.select(cfg, "training.exp_manager.explicit_log_dir")),
                config=str(config_path),
                program=command.module,
                env=dict(spec.env),
                layout={
                    "tp": layout.tp,
                    "pp": layout.pp,
                    "vp": layout.vp or 0,
                    "cp": layout.cp,
                    "mbs": layout.mbs,
                    "act_ckpt_layers": layout.act_ckpt_layers,
                },
                overrides=overrides,
                predicted={k: candidate.prediction.get(k) for k in ("step_time_s", "memory_per_gpu_gib", "mfu")},
            )
            bound.append(BoundRun(candidate, run, spec))
        return bound, refused

    def plan(self, bound: list[BoundRun], manifest: SearchManifest, extra_files: list[tuple[Path, str]]) -> Plan:
        backend = backend_class(self.context.cluster_type)(self.context)
        logs = self.settings.logs
        manifest_path = logs / "training_logs" / MANIFEST_FILE
        first = bound[0].spec
        files = tuple(file for run in bound for file in run.spec.files) + ((manifest_path, manifest.to_json()),)
        files += tuple(extra_files)
        name = f"{manifest.family}_{manifest.size_label}_search"
        common = {
            "stage": "training_search",
            "name": name,
            "directory": logs / "training_logs",
            "time_limit": first.time_limit,
            "nodes": first.nodes,
            "tasks_per_node": first.tasks_per_node,
            "files": files,
            "reads": first.reads,
            "writes": tuple(run.run.run_dir for run in bound),
            "notes": tuple(first.notes),
        }
        if backend.queues_jobs:
            candidates = JobSpec(
                commands=(Command(CANDIDATE_PROGRAM, ("--manifest", str(manifest_path))),),
                array_items=tuple(run.run.item for run in bound),
                array_limit=min(len(bound), self.settings.max_parallel_runs or len(bound)),
                **common,
            )
            after = Dependency.AFTER_ANY_END
        else:
            # One job, the candidates one after another (seed: BCP searches run sequentially).
            steps = tuple(
                Command(
                    CANDIDATE_PROGRAM, ("--manifest", str(manifest_path), "--item", str(run.run.item), "--keep-going")
                )
                for run in bound
            )
            minutes = math.ceil(first.time_limit.total_seconds() / 60) * len(bound)
            candidates = JobSpec(commands=steps, **{**common, "time_limit": timedelta(minutes=minutes)})
            after = Dependency.AFTER_SUCCESS
        analysis = Command(ANALYSIS_PROGRAM, ("--manifest", str(manifest_path)), distributed=False)
        name = f"{manifest.family}_{manifest.size_label}_analysis"
        return runs_then_analysis(self.context, backend, candidates, analysis, name, manifest.final_result, after)


def refuse_empty(count: int, why: str) -> None:
    if count == 0:
        raise LauncherError(f"no candidate left to launch: {why}")


def runs_then_analysis(context, backend, runs: JobSpec, analysis: Command, name: str, folder: str, after) -> Plan:
    """A search's plan: the job of its runs (an array, or one job running them in turn), then the CPU job that
    analyses them in `folder`, waiting for the runs as `after` says (AFTER_ANY for an array whose tasks may fail)."""
    analysis_job = JobSpec(
        stage=runs.stage,
        name=name,
        directory=Path(folder),
        commands=(analysis,),
        time_limit=ANALYSIS_TIME,
        uses_gpus=False,
        after_previous=after,
        writes=(folder,),
    )
    specs = [runs, analysis_job]
    backend.validate([specs])
    jobs = [[PlannedJob(spec, backend.script_path(spec), backend.render(spec)) for spec in specs]]
    return Plan(context, backend, jobs)
