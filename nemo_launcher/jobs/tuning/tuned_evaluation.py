"""Evaluation of a model tuned by prompt learning, adapters or IA3, any family: the frozen base with the method's
result file answers each line of prompt-learning jsonl test files; SQuAD's exact match and F1 score the answers.

    results = evaluate_tuned(cfg, placement, side)     # side: the family's GptSide (gpt/evaluate_tuned.py), T5Side, ...

The family's side loads the base (resharded to this TP), lays out a test line (its template encoder) and answers a
batch of lines greedily; the rest is shared: the result file's tensors go into the base (tuning/peft_methods.py:
the virtual-token table of a prompt file, or adapters / IA3 vectors inside its layers), each line is laid out by
the task template the result file recorded (training's layout, the answer left out), model copies beyond TP share
the lines, and rank 0 writes under <run.results_dir>/results/:

    <test file name>_predictions.jsonl   {"taskname", "prompt", "prediction", "answers"} per line, in file order
    qa_metrics.json                      {"<test file name>": {"exact_match", "f1", "examples"}, ..., "average": {...}}

A line's "answers" (every accepted answer, as the SQuAD preparation writes them) are its references, else its
answer field.
"""

from pathlib import Path
from typing import Any

import torch

# The result-file key of each layout and the methods whose files it may name.
METHODS = {
    "virtual_prompt_model_file": ("prompt",),
    "nemo_model": ("prompt",),
    "adapter_model_file": ("adapter", "ia3"),
}


class AnsweredLines(torch.utils.data.Dataset):
    """(line number, prompt ids, virtual flags, task number) of the lines this model copy answers."""

    def __init__(self, lines, numbers: list[int], encoder, room: int, with_virtual_tokens: bool):
        self.lines, self.numbers, self.encoder, self.room = lines, numbers, encoder, room
        self.with_virtual_tokens = with_virtual_tokens

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, index: int):
        number = self.numbers[index]
        line = self.lines[number]
        ids, virtual = self.encoder.prompt(line, self.room)
        if not self.with_virtual_tokens:  # the base model's own answers: the virtual positions go
            ids = [token for token, flag in zip(ids, virtual) if not flag]
            virtual = [False] * len(ids)
        return number, ids, virtual, self.encoder.task_numbers[line["taskname"]]


def virtual_placement(batch, width: int, device):
    """(mask [rows, width] of the batch's virtual positions, task ids [rows]) for VirtualPrompts.place."""
    mask = torch.zeros((len(batch), width), dtype=torch.bool, device=device)
    for row, (_, _, virtual, _) in enumerate(batch):
        mask[row, : len(virtual)] = torch.tensor(virtual, dtype=torch.bool)
    return mask, torch.tensor([task for _, _, _, task in batch])


def _templates(settings: dict[str, Any], source: str):
    from ...contract.schemas.gpt_prompt_learning import TaskTemplate
    from ..common.config import bind

    return [bind(TaskTemplate, template, f"{source}: tasks.{name}") for name, template in settings["tasks"].items()]


def _prompt_text(template, line: dict[str, Any]) -> str:
    from ...contract.schemas.gpt_prompt_learning import FIELD, VIRTUAL_MARKER

    text = template.prompt_template.rstrip()
    text = text[: -len("{" + template.answer_field + "}")].rstrip(" ")
    return FIELD.sub(lambda match: str(line[match.group(1)]), VIRTUAL_MARKER.sub("", text)).strip()


def evaluate_tuned(cfg, placement, side) -> dict[str, dict]:
    """{test file name: scores}, plus "average" for several files; every rank returns it.

    side.load(model section) -> (model, tokenizer, longest prompt the model takes in tokens);
    side.encoder(tokenizer, layout) -> a TemplateEncoder of the family; side.room(model section) -> tokens a prompt
    leaves free; side.answer(model, tokenizer, batch, prompts or None, model section) -> generated ids per line."""
    from types import SimpleNamespace

    from megatron.core import parallel_state

    from ..common.qa_metrics import squad_scores
    from ..core.qa_results import gathered, with_average, write_json, write_jsonl
    from .peft_methods import restore_result
    from .prompt_data import read_prompt_jsonl

    m = cfg.model
    model, tokenizer, max_length = side.load(m)
    settings, prompts = restore_result(model, m.method_file, METHODS[m.method_key])
    templates = _templates(settings, m.method_file)
    layout = SimpleNamespace(
        task_templates=templates,
        existing_tasks=[t.taskname for t in templates],
        new_tasks=[],
        encoder_seq_length=max_length - 1,
    )
    encoder = side.encoder(tokenizer, layout)
    by_task = {t.taskname: t for t in templates}
    with_virtual = prompts is not None and m.with_virtual_tokens
    dp_rank, dp_size = parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
    results: dict[str, dict] = {}
    for path in m.test_files:
        name = Path(path).stem
        lines = read_prompt_jsonl(path, by_task)
        dataset = AnsweredLines(lines, list(range(dp_rank, len(lines), dp_size)), encoder, side.room(m), with_virtual)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=m.lines_per_pass, num_workers=m.reader_workers, collate_fn=list
        )
        answers: dict[int, str] = {}
        for batch in loader:
            side.check(batch, path, m, max_length)
            generated = side.answer(model, tokenizer, batch, prompts if with_virtual else None, m)
            answers.update((number, tokenizer.decode(ids).strip()) for (number, *_), ids in zip(batch, generated))
        if prompts is not None:
            prompts.place(None, None)
        predictions = gathered(answers, placement.world_size)
        ordered = [predictions[i] for i in range(len(lines))]
        references = [line.get("answers") or [line[by_task[line["taskname"]].answer_field]] for line in lines]
        results[name] = squad_scores(ordered, references)
        if placement.rank == 0:
            write_jsonl(
                cfg.predictions_file(name),
                (
                    {
                        "taskname": line["taskname"],
                        "prompt": _prompt_text(by_task[line["taskname"]], line),
                        "prediction": text,
                        "answers": refs,
                    }
                    for line, text, refs in zip(lines, ordered, references)
                ),
                "evaluation",
            )
    results = with_average(results, ("exact_match", "f1"), "micro")
    if placement.rank == 0:
        write_json(cfg.results_file, results, "evaluation")
    if torch.distributed.is_initialized() and placement.world_size > 1:
        torch.distributed.barrier()
    return results
