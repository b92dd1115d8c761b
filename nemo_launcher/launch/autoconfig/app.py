"""The AutoConfigurator's run: size, base config, candidate search, submission, summary.

    python3 auto_configurator/main.py search_config=gpt3/unknown_size          # recommend a size, then search
    NEMO_LAUNCHER_DEBUG=1 python3 auto_configurator/main.py search_config=gpt3/5b   # everything but submitting

Everything is checked before anything is written: the settings, the base config (bound by the training schema),
every launched candidate (bound the same way), and the backend's rules. Then the files are written and the jobs
submitted as the launcher submits a pipeline (ledger, run lock, atomic submission), so `python3 -m nemo_launcher
status` follows the search too.
"""

import os
import shlex
import sys
from collections import Counter
from collections.abc import Sequence

from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from ...contract.autoconfig_search import SearchManifest
from ...contract.model_facts import facts_of_model
from ...contract.performance import estimate_job
from ..errors import LauncherError, config_error
from ..writes import make_directories, write_atomically
from .base_config import BaseConfig, base_config, size_label
from .grid import ModelShape, candidate_layouts
from .inference_search import InferenceSearch, plan_inference_search
from .scoring import device_profile, score_candidates
from .search_jobs import LauncherConfig, layout_overrides, refuse_empty
from .settings import PREFIX, TrainSettings, read_settings
from .sizing import PREDEFINED_SIZES, days_to_train, recommend_size
from .submit import submit


def _say(line: str = "") -> None:
    print(line, flush=True)


def _family(cfg: DictConfig) -> str:
    choice = str(cfg.get("search_config_value") or "")
    family = choice.split("/", 1)[0]
    if family not in PREDEFINED_SIZES:
        raise config_error("search_config", choice, f"families with search configs: {', '.join(PREDEFINED_SIZES)}")
    return family


def _model_size(family: str, settings: TrainSettings, cfg: DictConfig) -> float:
    if settings.model_size_in_b is not None:
        return settings.model_size_in_b
    if settings.base_training is not None:
        # The size of the model that config trains, counted by the performance model.
        probe = LauncherConfig.compose(cfg, settings, BaseConfig(family, 0.0, settings.base_training, {}))
        estimate = estimate_job(probe.base_section())
        if estimate is None:
            raise config_error(f"{PREFIX}.base_training", settings.base_training, "its model has nothing to count")
        return estimate.parameters / 1e9
    advice = recommend_size(
        family, settings.gpus, settings.max_training_days, settings.num_tokens_in_b, settings.tflops_per_gpu
    )
    _say(
        f"Recommended model size: {size_label(advice.size_in_b)} ({settings.num_nodes} nodes x "
        f"{settings.gpus_per_node} GPUs at {settings.tflops_per_gpu:g} TFLOPS train {advice.budget_in_b:g}B "
        f"parameters on {settings.num_tokens_in_b:g}B tokens in {settings.max_training_days:g} days; the largest "
        f"predefined {family} size within that)"
    )
    return advice.size_in_b


def _shape(family: str, size: float, section: dict) -> ModelShape:
    model = section["model"]
    facts = facts_of_model(model, "the base config")
    heads = min(stack.heads for stack in facts.stacks)
    return ModelShape(
        family=family,
        size_in_b=size,
        num_layers=min(stack.layers for stack in facts.stacks),
        num_attention_heads=heads,
        global_batch_size=int(model["global_batch_size"]),
        seq_length=int(model.get("encoder_seq_length") or model.get("seq_length") or 0),
        stacks=len(facts.stacks),
    )


def _dropped_lines(title: str, dropped: Counter) -> list[str]:
    return [f"  {count} {title}: {reason}" for reason, count in sorted(dropped.items(), key=lambda kv: -kv[1])]


def _candidate_file(name: str, overrides: dict, prediction: dict | None, why_not: str | None) -> str:
    lines = [f"# candidate {name}"]
    if prediction is not None:
        lines.append(
            f"# predicted: {prediction['step_time_s']} s per step, {prediction['memory_per_gpu_gib']} GiB per device"
        )
    if why_not:
        lines.append(f"# not launched: {why_not}")
    lines += [f"{key}: {value if value is not None else 'null'}" for key, value in overrides.items()]
    return "\n".join(lines) + "\n"


def run(cfg: DictConfig, argv: Sequence[str]) -> int:
    """Exit code: 0, or a user error's (one `Error:` line on stderr; NEMO_LAUNCHER_FULL_ERROR=1 raises it)."""
    try:
        _run(cfg, argv)
        return 0
    except LauncherError as error:
        if os.environ.get("NEMO_LAUNCHER_FULL_ERROR"):
            raise
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code
    except MissingMandatoryValue as error:
        print(f"Error: {error.full_key}='???': this value is mandatory: set it on the command line", file=sys.stderr)
        return 2
    except OmegaConfBaseException as error:
        print(f"Error: {getattr(error, 'full_key', '') or 'config'}: {error.msg.splitlines()[0]}", file=sys.stderr)
        return 2


def _run(cfg: DictConfig, argv: Sequence[str]) -> None:
    settings = read_settings(cfg)
    family = _family(cfg)
    size = _model_size(family, settings, cfg)
    label = size_label(size)
    days = days_to_train(family, size, settings.gpus, settings.num_tokens_in_b, settings.tflops_per_gpu)
    _say(
        f"Training {family} {label} on {settings.num_tokens_in_b:g}B tokens takes about {days:.2f} days on "
        f"{settings.gpus} GPUs at {settings.tflops_per_gpu:g} TFLOPS"
    )
    base = base_config(family, size, settings)
    launcher = LauncherConfig.compose(cfg, settings, base)
    base = launcher.fit_batch(base)
    base_section = launcher.base_section()  # the training schema's verdict on the base config, before any write
    inference = _inference_search(cfg, launcher)  # checked before the training search submits anything
    conf_dir = settings.logs / "conf"
    header = (
        f"# Base config of {family} {label} written by the AutoConfigurator ({cfg.search_config_value}): trainable,"
        " not yet tuned.\n"
    )
    base_files = [
        (settings.logs / f"base_cfg_{label}.yaml", base.text(header)),
        (conf_dir / "training" / family / f"base_cfg_{label}.yaml", base.text(header)),
    ]
    settings_words = " ".join(shlex.quote(word) for word in launcher.words)
    base_command = (
        f"python3 main.py --config-dir {shlex.quote(str(conf_dir))} stages=[training] "
        f"training={base.config_name} {settings_words}"
    )
    if not cfg.run_training_hp_search:
        for path, text in base_files:
            make_directories(path.parent)
            write_atomically(path, text.encode())
        _say(f"Base config: {base_files[0][0]}\nTrain it with: {base_command}")
        _submit_inference(inference, argv)
        return
    shape = _shape(family, size, base_section)
    layouts, broken = candidate_layouts(settings, shape)
    device = device_profile(settings, base_section)
    scored, too_big = score_candidates(base_section, layouts, device, launcher.is_gpu())
    _say(
        f"Candidates: {len(layouts) + sum(broken.values())} layouts in the grid, {len(layouts)} allowed by the rules,"
        f" {len(scored)} predicted to fit ({device.name}, {device.memory_gib:.1f} GiB per device)"
    )
    for line in _dropped_lines("dropped", broken) + _dropped_lines("dropped", too_big):
        _say(line)
    refuse_empty(len(scored), "every allowed layout is predicted not to fit; add nodes, TP or PP sizes")
    bound, refused = launcher.bind_candidates(scored, family, label, settings.limit_search_runs, settings.num_nodes)
    for name, reason in refused:
        _say(f"  refused by the training schema: {name}: {reason}")
    refuse_empty(len(bound), "the training schema refused every candidate (reasons above)")
    candidate_files = _candidate_files(settings, family, label, layouts, scored, bound, launcher)
    manifest = SearchManifest(
        family=family,
        size_label=label,
        num_nodes=settings.num_nodes,
        gpus_per_node=settings.gpus_per_node,
        global_batch_size=shape.global_batch_size,
        seq_length=shape.seq_length,
        output_top_n=settings.output_top_n,
        max_steps_per_run=settings.max_steps_per_run,
        base_config=base.config_name,
        conf_dir=str(conf_dir),
        final_result=str(settings.logs / "final_result"),
        launcher_settings=list(launcher.words),
        runs=[run.run for run in bound],
        launcher_scripts_path=str(launcher.context.launcher_scripts_path),
        train_optimal_config=bool(cfg.get("train_optimal_config", False)),
    )
    _say(f"Launching the {len(bound)} fastest predicted (limit_search_runs={settings.limit_search_runs}):")
    for run in bound:
        _say(
            f"  {run.run.item}: {run.run.name}: {run.scored.step_time_s:.4g} s/step predicted, "
            f"{run.scored.prediction['memory_per_gpu_gib']} GiB"
        )
    plan = launcher.plan(bound, manifest, base_files + candidate_files)
    submit(plan, argv)
    _say(f"Base config: {base_files[0][0]} (train it with: {base_command})")
    _say(
        f"When the analysis job ends: {manifest.final_result}/ holds the ranking, "
        f"optimal_config_{label}_{settings.num_nodes}nodes.yaml and the command that trains it"
    )
    _submit_inference(inference, argv)


def _candidate_files(settings, family, label, layouts, scored, bound, launcher) -> list:
    """<logs>/candidate_configs/<name>.yaml for every layout the rules allow: what it sets, its prediction, and why
    it was not launched (the seed writes the whole grid there)."""
    launched = {run.scored.layout for run in bound}
    predictions = {candidate.layout: candidate.prediction for candidate in scored}
    files = []
    for layout in layouts:
        name = f"{family}_{label}_{settings.num_nodes}nodes_{layout.name()}"
        prediction = predictions.get(layout)
        if layout in launched:
            why_not = None
        elif prediction is None:
            why_not = "predicted not to fit"
        else:
            why_not = f"not among the {settings.limit_search_runs} fastest predicted that the training schema accepts"
        overrides = layout_overrides(layout, launcher.is_gpu(), launcher.model_keys())
        files.append(
            (
                settings.logs / "candidate_configs" / f"{name}.yaml",
                _candidate_file(name, overrides, prediction, why_not),
            )
        )
    return files


def _inference_search(cfg: DictConfig, launcher: LauncherConfig) -> InferenceSearch | None:
    if not cfg.get("run_inference_hp_search"):
        return None
    search = plan_inference_search(cfg, launcher)
    if search is None:
        print(
            f"Note: run_inference_hp_search=True: {cfg.search_config_value} has no inference_settings (the inference "
            "search is GPT's only): skipped (set run_inference_hp_search=False to silence this)",
            file=sys.stderr,
            flush=True,
        )
    return search


def _submit_inference(search: InferenceSearch | None, argv: Sequence[str]) -> None:
    if search is None:
        return
    for line in search.lines:
        _say(line)
    submit(search.plan, argv)
