"""Evaluation of a GPT tuned by prompt learning, adapters or IA3: greedy answers of the frozen base with the method's
result file, scored by SQuAD's exact match and F1 (evaluation=prompt_gpt3/squad, adapter_gpt3/squad, ia3_gpt3/squad).

    python3 -u -m nemo_launcher.jobs.gpt.evaluate_tuned --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.evaluate_tuned --config ...     (TP, or copies sharing lines)

Reads the resolved `evaluation` section (contract/schemas/tuned_evaluation.py). The base .nemo (resharded to this
TP) takes the result file's tensors: the virtual-token table of a prompt file, placed at each line's virtual
positions, or the adapters / IA3 vectors inside its layers. Each test line is laid out by the task template the
result file recorded (training's layout, the answer field left out) and answered greedily, several lines per
forward pass; the copies beyond TP share the lines. Rank 0 writes, under <run.results_dir>/results/:

    <test file name>_predictions.jsonl   {"taskname", "prompt", "prediction", "answers"} per line, in file order
    qa_metrics.json                      {"<test file name>": {"exact_match", "f1", "examples"}, ..., "average": {...}}

and prints a table. A line's "answers" (every accepted answer, as the SQuAD preparation writes them) are its
references, else its answer field. Exit codes: 0 done, 2 configuration error, 74 a result could not be written,
75 run.results_dir is in use by another job, else a crash.
"""
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

PROG = "python3 -m nemo_launcher.jobs.gpt.evaluate_tuned"
METHODS = {"virtual_prompt_model_file": ("prompt",), "nemo_model": ("prompt",), "adapter_model_file": ("adapter", "ia3")}


class AnsweredLines(torch.utils.data.Dataset):
    """(line number, prompt ids, virtual flags, task number) of the lines this model copy answers."""

    def __init__(self, lines, numbers: List[int], encoder, room: int, with_virtual_tokens: bool):
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


def _templates(settings: Dict[str, Any], source: str):
    from ..common.config import bind
    from ...contract.schemas.gpt_prompt_learning import TaskTemplate

    return [bind(TaskTemplate, template, f"{source}: tasks.{name}") for name, template in settings["tasks"].items()]


def _placer(prompts, batch):
    """prepare() for greedy_generate_batch: this batch's virtual positions and tasks, as wide as the tokens."""
    def place(tokens: torch.Tensor) -> None:
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        for row, (_, _, virtual, _) in enumerate(batch):
            mask[row, :len(virtual)] = torch.tensor(virtual, dtype=torch.bool)
        prompts.place(mask, torch.tensor([task for _, _, _, task in batch]))
    return place


def _prompt_text(template, line: Dict[str, Any]) -> str:
    from ...contract.schemas.gpt_prompt_learning import FIELD, VIRTUAL_MARKER

    text = template.prompt_template.rstrip()
    text = text[: -len("{" + template.answer_field + "}")].rstrip(" ")
    return FIELD.sub(lambda match: str(line[match.group(1)]), VIRTUAL_MARKER.sub("", text))


def evaluate(cfg, placement) -> Dict[str, dict]:
    """{test file name: scores}, plus "average" for several files; every rank returns it."""
    from types import SimpleNamespace

    from megatron.core import parallel_state

    from ..common.config import JobConfigError
    from ..common.qa_metrics import squad_scores
    from ..common.qa_results import gathered, with_average, write_json, write_jsonl
    from .generate import greedy_generate_batch
    from .nemo_archive import load_gpt_from_nemo, read_nemo_config
    from .prompt_data import TemplateEncoder, read_prompt_jsonl
    from .prompt_tuning import restore_result

    m = cfg.model
    model, tokenizer = load_gpt_from_nemo(m.language_model_path, m.tensor_model_parallel_size, 1, m.precision_name())
    settings, prompts = restore_result(model, m.method_file, METHODS[m.method_key])
    templates = _templates(settings, m.method_file)
    base = read_nemo_config(m.language_model_path)
    max_length = int(base.get("max_position_embeddings") or base["encoder_seq_length"])
    layout = SimpleNamespace(task_templates=templates, existing_tasks=[t.taskname for t in templates], new_tasks=[],
                             encoder_seq_length=max_length - 1)
    encoder = TemplateEncoder(tokenizer, layout, add_eos=False)
    by_task = {t.taskname: t for t in templates}
    with_virtual = prompts is not None and m.with_virtual_tokens
    dp_rank, dp_size = parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
    results: Dict[str, dict] = {}
    for path in m.test_files:
        name = Path(path).stem
        lines = read_prompt_jsonl(path, by_task)
        dataset = AnsweredLines(lines, list(range(dp_rank, len(lines), dp_size)), encoder, m.tokens_to_generate, with_virtual)
        loader = torch.utils.data.DataLoader(dataset, batch_size=m.lines_per_pass, num_workers=m.reader_workers,
                                             collate_fn=list)
        answers: Dict[int, str] = {}
        for batch in loader:
            for number, ids, _, _ in batch:
                if len(ids) + m.tokens_to_generate > max_length:
                    raise JobConfigError(f"{path}:{number + 1}: its prompt takes {len(ids)} tokens; with "
                                         f"evaluation.model.tokens_to_generate {m.tokens_to_generate} that exceeds the "
                                         f"model's {max_length} positions: lower tokens_to_generate, or give the task "
                                         f"template a truncate_field")
            prepare = _placer(prompts, batch) if with_virtual else None
            generated = greedy_generate_batch(model, [ids for _, ids, _, _ in batch], m.tokens_to_generate,
                                              tokenizer.eod, tokenizer.vocab_size, max_length, prepare)
            answers.update((number, tokenizer.decode(ids).strip()) for (number, *_), ids in zip(batch, generated))
        if prompts is not None:
            prompts.place(None, None)
        predictions = gathered(answers, placement.world_size)
        ordered = [predictions[i] for i in range(len(lines))]
        references = [line.get("answers") or [line[by_task[line["taskname"]].answer_field]] for line in lines]
        results[name] = squad_scores(ordered, references)
        if placement.rank == 0:
            write_jsonl(cfg.predictions_file(name),
                        ({"taskname": line["taskname"], "prompt": _prompt_text(by_task[line["taskname"]], line),
                          "prediction": text, "answers": refs} for line, text, refs in zip(lines, ordered, references)),
                        "evaluation")
    results = with_average(results, ("exact_match", "f1"), "micro")
    if placement.rank == 0:
        write_json(cfg.results_file, results, "evaluation")
    if torch.distributed.is_initialized() and placement.world_size > 1:
        torch.distributed.barrier()
    return results


def schema_for(section: Dict[str, Any]):
    """The seed's two layouts: prompt_gpt3's nemo_model / prompt_dataset_paths, or the others' data.test_ds."""
    from ...contract.schemas.tuned_evaluation import PromptGptEvaluationConfig, TunedEvaluationConfig

    model = section.get("model") if isinstance(section, dict) else None
    return PromptGptEvaluationConfig if isinstance(model, dict) and "nemo_model" in model else TunedEvaluationConfig


def main(argv: Optional[List[str]] = None) -> int:
    from ..common.qa_results import run_evaluation

    return run_evaluation(argv, PROG, lambda section: schema_for(section).from_dict(section), evaluate,
                          lambda cfg: f"{cfg.model.method_file} on {cfg.model.language_model_path}")


if __name__ == "__main__":
    sys.exit(main())
