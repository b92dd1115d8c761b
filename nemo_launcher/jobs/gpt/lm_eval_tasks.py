"""lm-eval task configs that read local jsonl files (no network) for the names in contract/eval_tasks.py.

    configs = local_task_configs(["lambada", "piqa"], "/data/eval_harness_data")
    lm_eval.simple_evaluate(model=lm, tasks=configs, task_manager=TaskManager(include_defaults=False))

The built-in YAML is loaded whole (prompt templates, `!function` helpers, metrics) and only its data
source is replaced: lm-eval does not merge a partial dict with a registered task, so a dict naming
just the task and the data would become a bare task with no prompts. `load_yaml` is a private
module of lm-eval, hence the pinned version (lm-eval==0.4.13).
"""

import json
from pathlib import Path
from typing import Any

from nemo_launcher.contract.eval_tasks import EVAL_TASKS

from ..common.config import JobConfigError

_SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")


def local_task_configs(names: list[str], data_dir: str, num_fewshot: int | None = None) -> list[dict[str, Any]]:
    return [local_task_config(name, Path(data_dir), num_fewshot) for name in names]


def local_task_config(name: str, data_dir: Path, num_fewshot: int | None = None) -> dict[str, Any]:
    """The task's built-in config reading `data_dir`; num_fewshot (None: the task's default) is set here,
    where lm-eval takes it silently, rather than passed to simple_evaluate, which warns for every task."""
    import lm_eval
    from lm_eval.tasks._yaml_loader import load_yaml

    task = EVAL_TASKS[name]
    data_file = (data_dir / task.data_file(name)).resolve()  # lm-eval resolves relative paths against the CWD
    _check_data_file(name, data_file, task.fields)
    config = load_yaml(Path(lm_eval.__file__).parent / "tasks" / task.lm_eval_yaml)
    for key in ("tag", "group"):  # groups would pull in sibling tasks from the hub
        config.pop(key, None)
    config.update(
        task=name, dataset_path="json", dataset_name=None, dataset_kwargs={"data_files": {task.split: str(data_file)}}
    )
    for key in _SPLIT_KEYS:
        config[key] = None
    config[f"{task.split}_split"] = task.split
    if num_fewshot is not None:
        config["num_fewshot"] = num_fewshot
    return config


def _check_data_file(name: str, path: Path, fields) -> None:
    """A missing file or a row without the task's fields fails here with the expected layout, not deep in lm-eval."""
    where = f"run.task_data_dir: task {name} reads {path}"
    if not path.is_file():
        raise JobConfigError(
            f"{where}, which does not exist; write one JSON object per line with the fields {', '.join(fields)}"
        )
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        raise JobConfigError(f"{where}: its first line is not JSON") from None
    missing = [field for field in fields if not isinstance(row, dict) or field not in row]
    if missing:
        raise JobConfigError(
            f"{where}: its rows need the fields {', '.join(fields)}; the first lacks {', '.join(missing)}"
        )
