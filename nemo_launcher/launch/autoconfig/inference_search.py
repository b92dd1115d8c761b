"""The AutoConfigurator's GPT inference search (run_inference_hp_search=True): TP x PP x batch size, one benchmark job
per setting over the project's own generation path, then an analysis job that writes final_output.csv.

    search = plan_inference_search(autoconfig_cfg, launcher)   # None: the search config has no inference_settings
    print(*search.lines, sep="\n"); submit(search.plan, argv)

`search_config.inference_settings` holds the seed's keys: `run` (model_type, model_train_name, gpus_per_node,
data_type, time_limit, results_dir, tensor_parallel_sizes, pipeline_parallel_sizes) and `benchmark` (input_len,
output_len, batch_sizes, beam_width, topk, topp), plus `run.nemo_file` (null: the .nemo the launcher's conversion
writes for model_train_name under base_results_dir) and `benchmark.seed`. The archive must exist at launch: its
model_config.yaml decides which settings can run (contract/autoconfig_inference.py, which the benchmark applies
again to the file it opens). Settings the model cannot split, or that the performance model's parameter count
predicts over train_settings.gpu_memory_gb (contract/autoconfig_inference.memory_per_gpu_bytes), are dropped, with
how many and why; PP > 1, beam search,
a prompt and output longer than the model's positions, and Base Command Platform are refused in one line, exit 2.

On Slurm the settings are one job array of one task each (a setting's TP ranks are a torchrun its task starts), all
at once unless train_settings.max_parallel_runs limits them, and the analysis waits with afterany. Here
(cluster_type=interactive) one job runs them one after another, a failure not stopping the next, then the analysis.
"""

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from ...contract.autoconfig_inference import (
    DATA_TYPES,
    INFERENCE_MANIFEST_FILE,
    PIPELINE_REFUSAL,
    Benchmark,
    InferenceManifest,
    InferenceSetting,
    benchmark_problem,
    memory_per_gpu_bytes,
    setting_problem,
)
from ...contract.binding import JobConfigError
from ...contract.durations import SlurmTime
from ...contract.model_facts import ModelFileError, facts_of_model, read_nemo_config
from ..backends import backend_class
from ..errors import ConfigError, config_error
from ..job_spec import Command, Dependency, JobSpec
from ..pipeline import Plan
from .search_jobs import LauncherConfig, runs_then_analysis

PREFIX = "search_config.inference_settings"
BENCHMARK_PROGRAM = "nemo_launcher.jobs.autoconfig.inference_benchmark"
ANALYSIS_PROGRAM = "nemo_launcher.jobs.autoconfig.inference_analysis"
DEFAULT_SEED = 1234
# Where conf/conversion/gpt3/convert_gpt3.yaml writes the .nemo of a training run named model_train_name.
CONVERTED_NEMO = "{base_results_dir}/{model_train_name}/convert_nemo/results/megatron_gpt.nemo"


@dataclass(frozen=True)
class InferenceSearch:
    plan: Plan
    manifest: InferenceManifest
    lines: tuple[str, ...]  # what the run prints about the grid before submitting


def _integers(key: str, value, minimum: int = 1) -> tuple[int, ...]:
    items = list(value) if isinstance(value, (list, tuple, ListConfig)) else None
    if not items or any(isinstance(i, bool) or not isinstance(i, int) or i < minimum for i in items):
        raise config_error(f"{PREFIX}.{key}", value, f"give a non-empty list of integers of at least {minimum}")
    return tuple(sorted(set(items)))


def _integer(key: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise config_error(f"{PREFIX}.{key}", value, f"must be an integer of at least {minimum}")
    return value


def _benchmark(raw: dict) -> Benchmark:
    topp = raw.get("topp", 0.0)
    if isinstance(topp, bool) or not isinstance(topp, (int, float)):
        raise config_error(f"{PREFIX}.benchmark.topp", topp, "must be a number in [0, 1]")
    return Benchmark(
        input_len=_integer("benchmark.input_len", raw.get("input_len"), 1),
        output_len=_integer("benchmark.output_len", raw.get("output_len"), 1),
        beam_width=_integer("benchmark.beam_width", raw.get("beam_width", 1), 1),
        topk=_integer("benchmark.topk", raw.get("topk", 0), 0),
        topp=float(topp),
        seed=_integer("benchmark.seed", raw.get("seed", DEFAULT_SEED), 0),
    )


def _nemo_facts(path: str):
    """(model section, heads, query groups, positions) of the archive's model, read without torch."""
    key = f"{PREFIX}.run.nemo_file"
    if not Path(path).is_file():
        raise config_error(
            key,
            path,
            "no .nemo there: convert the trained model first (main.py stages=[conversion]), name one, or set "
            "run_inference_hp_search=False",
        )
    try:
        config = read_nemo_config(path)
        facts = facts_of_model(config, path)
    except (ModelFileError, JobConfigError) as error:
        raise config_error(key, path, str(error)) from None
    if len(facts.stacks) != 1:
        raise config_error(key, path, "the inference search takes a GPT (one transformer stack)")
    heads = facts.stacks[0].heads
    positions = int(config.get("max_position_embeddings") or 0) or None
    return config, heads, int(config.get("num_query_groups") or heads), positions


def _memory_problem(model, tp: int, batch: int, benchmark: Benchmark, data_type: str, gpu_gb: int) -> str | None:
    tokens = benchmark.input_len + benchmark.output_len - 1  # the last forward's sequence
    need = memory_per_gpu_bytes(model, tp, batch, tokens, data_type)
    if need is None or need <= gpu_gb * 1e9:
        return None
    return f"TP {tp} batch {batch}: predicted {need / 2**30:.1f} GiB per GPU, over the {gpu_gb} GB of gpu_memory_gb"


def plan_inference_search(cfg: DictConfig, launcher: LauncherConfig) -> InferenceSearch | None:
    """The search's plan, every setting checked; None when the search config has no inference_settings (T5, mT5
    and BERT: the seed's inference search is GPT's only). Raises ConfigError before anything is written."""
    section = OmegaConf.select(cfg, PREFIX)
    if section is None:
        return None
    if str(cfg.cluster_type) == "bcp":
        raise config_error(
            "cluster_type",
            "bcp",
            "the inference search runs on Slurm (BCM only, as in the seed) or here "
            "(interactive): set run_inference_hp_search=False on Base Command Platform",
        )
    raw = OmegaConf.to_container(section, resolve=True)
    run, bench = raw.get("run") or {}, raw.get("benchmark") or {}
    if run.get("model_type") != "gpt3":
        raise config_error(f"{PREFIX}.run.model_type", run.get("model_type"), "the inference search is GPT's: gpt3")
    data_type = run.get("data_type")
    if data_type not in DATA_TYPES:
        raise config_error(f"{PREFIX}.run.data_type", data_type, f"one of {', '.join(DATA_TYPES)}")
    model_name = str(run.get("model_train_name"))
    tps = _integers("run.tensor_parallel_sizes", run.get("tensor_parallel_sizes"))
    pps = _integers("run.pipeline_parallel_sizes", run.get("pipeline_parallel_sizes"))
    if pps != (1,):
        raise config_error(f"{PREFIX}.run.pipeline_parallel_sizes", list(pps), PIPELINE_REFUSAL)
    batches = _integers("benchmark.batch_sizes", bench.get("batch_sizes"))
    gpus_per_node = _integer("run.gpus_per_node", run.get("gpus_per_node"), 1)
    try:
        time_limit = timedelta(seconds=SlurmTime.parse(run.get("time_limit"), f"{PREFIX}.run.time_limit").seconds)
    except JobConfigError as error:
        raise ConfigError(str(error)) from None
    benchmark = _benchmark(bench)
    nemo = run.get("nemo_file") or CONVERTED_NEMO.format(
        base_results_dir=cfg.base_results_dir, model_train_name=model_name
    )
    nemo = str(Path(str(nemo)).absolute())  # the jobs run in their own folders
    model, heads, groups, positions = _nemo_facts(str(nemo))
    bad = benchmark_problem(benchmark, positions)
    if bad:
        raise config_error(f"{PREFIX}.benchmark.{bad[0]}", bad[1], bad[2])
    results = Path(str(run.get("results_dir"))).absolute() / "inference"
    settings, dropped = [], Counter()
    for tp in tps:
        problem = setting_problem(tp, 1, heads, groups)
        if problem is None and tp > gpus_per_node:
            problem = f"TP {tp} exceeds the {gpus_per_node} GPUs of the one node a setting runs on"
        if problem:
            dropped[problem] += len(batches)
            continue
        for batch in batches:
            too_big = _memory_problem(model, tp, batch, benchmark, data_type, launcher.settings.gpu_memory_gb)
            if too_big:
                dropped[too_big] += 1
                continue
            name = f"{model_name}_tp_{tp}_pp_1_bs_{batch}"
            settings.append(InferenceSetting(len(settings), name, str(results / name), tp, 1, batch))
    reasons = [f"{count} dropped: {reason}" for reason, count in dropped.most_common()]
    if not settings:
        left = f"no setting is left ({'; '.join(reasons)})"
        raise config_error(f"{PREFIX}.run.tensor_parallel_sizes", list(tps), left)
    lines = [f"Inference search: {len(tps) * len(batches)} settings in the grid, {len(settings)} run"]
    lines += [f"  {reason}" for reason in reasons]
    manifest = InferenceManifest(
        model_name=model_name,
        nemo_file=str(nemo),
        data_type=data_type,
        benchmark=benchmark,
        final_summary=str(results / "final_summary"),
        settings=settings,
    )
    plan = _plan(launcher, manifest, results, time_limit, launcher.settings.max_parallel_runs)
    lines.append(f"  results: {manifest.final_summary}/final_output.csv when the analysis job ends")
    return InferenceSearch(plan, manifest, tuple(lines))


def _plan(launcher, manifest: InferenceManifest, results: Path, time_limit: timedelta, max_parallel) -> Plan:
    backend = backend_class(launcher.context.cluster_type)(launcher.context)
    manifest_path = results / INFERENCE_MANIFEST_FILE
    settings = manifest.settings
    gpu = launcher.is_gpu()
    common = {
        "stage": "inference_search",
        "name": f"{manifest.model_name}_inference_search",
        "directory": results,
        "nodes": 1,
        "tasks_per_node": 1,  # the setting's ranks are a torchrun its one task starts
        "uses_gpus": gpu,
        "gpus_per_node": max(s.tp * s.pp for s in settings) if gpu else None,
        "files": ((manifest_path, manifest.to_json()),),
        "reads": ((f"{PREFIX}.run.nemo_file", manifest.nemo_file),),
        "writes": tuple(s.run_dir for s in settings),
    }
    arguments = ("--manifest", str(manifest_path))
    if backend.queues_jobs:
        settings_job = JobSpec(
            commands=(Command(BENCHMARK_PROGRAM, arguments, distributed=False),),
            time_limit=time_limit,
            array_items=tuple(s.item for s in settings),
            array_limit=min(len(settings), max_parallel or len(settings)),
            **common,
        )
        after = Dependency.AFTER_ANY_END
    else:
        steps = tuple(
            Command(BENCHMARK_PROGRAM, (*arguments, "--item", str(s.item), "--keep-going"), distributed=False)
            for s in settings
        )
        settings_job = JobSpec(commands=steps, time_limit=time_limit * len(settings), **common)
        after = Dependency.AFTER_SUCCESS
    analysis = Command(ANALYSIS_PROGRAM, arguments, distributed=False)
    name = f"{manifest.model_name}_inference_analysis"
    return runs_then_analysis(launcher.context, backend, settings_job, analysis, name, manifest.final_summary, after)
