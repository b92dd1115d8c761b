"""The zero-shot tasks `evaluation=gpt3/*` knows, and where their local data lives. Pure Python, shared by
both sides: the evaluation stage checks `run.tasks` with it, the job (jobs/gpt/lm_eval_tasks.py) builds
lm-eval tasks from it.

Each task is lm-eval's own built-in task (prompts, choices, metrics), read from a local file instead of
the Hugging Face hub, which compute nodes cannot reach:

    <run.task_data_dir>/<task>/<split>.jsonl       e.g. eval_harness_data/lambada/test.jsonl

with one JSON object per line holding the fields of the original dataset (listed per task below).
"""

import dataclasses

ALL_TASKS = "all_tasks"


@dataclasses.dataclass(frozen=True)
class EvalTask:
    lm_eval_yaml: str  # the built-in task config, relative to lm_eval/tasks
    split: str  # the split it evaluates on (its data file is <split>.jsonl)
    fields: tuple[str, ...]  # keys every jsonl row must have (those of the Hugging Face dataset)

    def data_file(self, name: str) -> str:
        return f"{name}/{self.split}.jsonl"


EVAL_TASKS = {
    "lambada": EvalTask("lambada/lambada_openai.yaml", "test", ("text",)),
    "boolq": EvalTask("super_glue/boolq/default.yaml", "validation", ("passage", "question", "label")),
    # race: "problems" is the dataset's string form of a Python list of {question, options, answer}.
    "race": EvalTask("race/race.yaml", "test", ("article", "problems")),
    "piqa": EvalTask("piqa/piqa.yaml", "validation", ("goal", "sol1", "sol2", "label")),
    "hellaswag": EvalTask(
        "hellaswag/hellaswag.yaml", "validation", ("activity_label", "ctx_a", "ctx_b", "endings", "label")
    ),
    "winogrande": EvalTask("winogrande/default.yaml", "validation", ("sentence", "option1", "option2", "answer")),
    # Document-level wikitext ("page": a whole article), as lm-eval's wikitext task reads it.
    "wikitext2": EvalTask("wikitext/wikitext.yaml", "test", ("page",)),
    "wikitext103": EvalTask("wikitext/wikitext.yaml", "test", ("page",)),
}


def parse_tasks(value: str | list[str] | None) -> list[str]:
    """`all_tasks`, one name, a comma-separated string or a list -> task names in order, without repeats.

    Raises ValueError naming the unknown entry and the valid ones.
    """
    if value is None:
        raise ValueError(f"name tasks: {ALL_TASKS} or some of {', '.join(EVAL_TASKS)}")
    items = value.split(",") if isinstance(value, str) else [str(item) for item in value]
    names: list[str] = []
    for item in (item.strip() for item in items):
        expanded = list(EVAL_TASKS) if item == ALL_TASKS else [item]
        for name in expanded:
            if name not in EVAL_TASKS:
                raise ValueError(f"unknown task {name!r}; choose {ALL_TASKS} or from {', '.join(EVAL_TASKS)}")
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"no task named; choose {ALL_TASKS} or from {', '.join(EVAL_TASKS)}")
    return names
