"""Zero-shot (or few-shot) evaluation of a `.nemo` GPT with lm-eval, on task data from local files only.

    python3 -u -m nemo_launcher.jobs.gpt.evaluate --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.evaluate --config ...     (model.tensor_model_parallel_size=2)

Tasks (run.tasks) are lm-eval's built-in ones (contract/eval_tasks.py lists them and the jsonl fields each
needs), read from <run.task_data_dir>/<task>/<split>.jsonl. Nothing is downloaded: the Hugging Face
libraries are put in offline mode, so a missing file is an error, never a 25-second network retry.
Writes <run.results_dir>/results/lm_eval_results.json, prints lm-eval's table and a summary; rank 0 holds
run.results_dir's lock while it runs. Exit codes: 0 done, 2 configuration error, 74 a write failed for lack
of space or permission, 75 run.results_dir is in use by another job (one `Error:` line on stderr for each),
anything else a crash.
"""

import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

from ...contract.schemas.gpt_evaluation import RESULTS_FILE, EvaluationConfig


def _job_environment(cfg: EvaluationConfig) -> None:
    """Before datasets/huggingface_hub are imported: no network, caches in the job's folder rather than a home
    directory that compute nodes may not have, and no forked workers."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    # lm-eval's bootstrap of the standard errors otherwise forks a multiprocessing Pool of os.cpu_count() workers
    # from this process: the one holding the model, dozens of threads and, on a GPU node, a CUDA context (a
    # hundred or more forks there). One such worker outlived Pool.terminate() in a CI run, and the job hung with
    # its nodes held. In this process lm-eval draws the same resamples (one seed per chunk, either way).
    os.environ["DISABLE_MULTIPROC"] = "1"
    if "HF_HOME" not in os.environ and "HF_DATASETS_CACHE" not in os.environ:
        os.environ["HF_DATASETS_CACHE"] = str(Path(cfg.run.results_dir) / "hf_datasets_cache")


def evaluate(cfg: EvaluationConfig) -> dict[str, Any]:
    """Runs the tasks; rank 0 writes the results file and prints the table. Returns lm-eval's results."""
    _job_environment(cfg)
    import lm_eval
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import handle_non_serializable, make_table

    from nemo_launcher.contract.eval_tasks import parse_tasks

    from ..core.nemo_archive import read_nemo_config
    from .inference import load_gpt_from_nemo
    from .lm_adapter import MegatronGPTLM
    from .lm_eval_tasks import local_task_configs

    names = parse_tasks(cfg.run.tasks)
    # num_fewshot goes into each task's config: passed to simple_evaluate, lm-eval warns that it overrides
    # the task's default on every task.
    tasks = local_task_configs(
        names, cfg.run.task_data_dir, cfg.model.num_fewshot
    )  # files checked before the model loads
    _quiet_lm_eval()
    model, tokenizer = load_gpt_from_nemo(
        cfg.evaluated_nemo, cfg.model.tensor_model_parallel_size, 1, cfg.model.precision_name()
    )
    max_length = int(read_nemo_config(cfg.evaluated_nemo)["encoder_seq_length"])
    lm = MegatronGPTLM(model, tokenizer, max_length=max_length, batch_size=cfg.model.eval_batch_size)
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=tasks,
        task_manager=TaskManager(include_defaults=False),  # the default index costs ~5 s
        limit=cfg.model.limit,
        bootstrap_iters=cfg.model.bootstrap_iters,
        log_samples=False,
    )
    if _rank() == 0:
        record = {
            "model": cfg.evaluated_nemo,
            "tasks": names,
            "num_fewshot": cfg.model.num_fewshot,
            "limit": cfg.model.limit,
            "results": results["results"],
            "n-samples": results.get("n-samples"),
            "versions": results.get("versions"),
        }
        cfg.results_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = cfg.results_file.with_name(f".{RESULTS_FILE}.tmp")
        temporary.write_text(json.dumps(record, indent=2, default=handle_non_serializable) + "\n")
        os.replace(temporary, cfg.results_file)
        print(make_table(results), flush=True)
    return results


def _quiet_lm_eval() -> None:
    """lm-eval records the git commit of the working directory by running `git describe`, which prints
    `fatal: not a git repository` into the log wherever a job runs outside one (compute nodes, job folders).
    Same answer, without the stderr line; `datasets` draws a progress bar for each small local file.
    lm-eval also adds torch's environment report to its results (torch.utils.collect_env runs `pip list` and
    probes the GPUs; with the transformers import it asks for, about 2 s per evaluation job): the results file
    keeps none of it, so only lm-eval's version is recorded."""
    import subprocess

    import datasets
    import lm_eval.evaluator

    def git_commit() -> str | None:
        try:
            found = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if found.returncode != 0:
            return None
        return found.stdout.strip() or None

    def lm_eval_version(storage: dict[str, Any]) -> None:
        storage["lm_eval_version"] = importlib.metadata.version("lm_eval")

    if hasattr(lm_eval.evaluator, "get_git_commit_hash"):
        lm_eval.evaluator.get_git_commit_hash = git_commit
    if hasattr(lm_eval.evaluator, "add_env_info"):
        lm_eval.evaluator.add_env_info = lm_eval_version
    datasets.disable_progress_bars()


def evaluation_summary(cfg: EvaluationConfig, results: dict[str, Any], seconds: float):
    """One line per task with its metrics (value ± stderr), then the results file."""
    from ..common.report import Summary, duration

    summary = Summary(f"evaluation finished: {cfg.evaluated_nemo}")
    samples = results.get("n-samples") or {}
    for task, metrics in results["results"].items():
        shown = []
        for key, value in metrics.items():
            name, comma, filter_name = key.partition(",")  # lm-eval names metrics "<metric>,<filter>"
            if not comma or name.endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            error = metrics.get(f"{name}_stderr,{filter_name}")
            spread = f" ± {error:.4g}" if isinstance(error, (int, float)) else ""
            shown.append(f"{name} {value:.4g}{spread}")
        effective = (samples.get(task) or {}).get("effective")
        counted = f" ({effective} samples)" if effective is not None else ""
        summary.add(task, (", ".join(shown) or "no metrics") + counted)
    return summary.add("results", cfg.results_file).add("time", duration(seconds))


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def main(argv=None) -> int:
    import time

    from ..common.config import JobConfigError
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed_run

    started = time.monotonic()
    try:
        prog = "python3 -m nemo_launcher.jobs.gpt.evaluate"
        with claimed_run(argv, prog, EvaluationConfig.from_dict, lambda cfg: cfg.writes()[0]) as (cfg, _):
            results = evaluate(cfg)
            if results is not None:
                evaluation_summary(cfg, results, time.monotonic() - started).show(_rank())
        return 0
    except (JobConfigError, JobFault) as error:
        return print_error(error)


if __name__ == "__main__":
    sys.exit(main())
