"""Evaluation of a fine-tuned T5/mT5 on question answering (t5/squad, mt5/xquad): greedy answers, SQuAD scores.

    python3 -u -m nemo_launcher.jobs.t5.evaluate --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.t5.evaluate --config ...      (TP, or data-parallel shares)

Reads the resolved `evaluation` section (schema: contract/schemas/t5_evaluation.py): the .nemo in
model.restore_from_path (resharded to model.tensor_model_parallel_size) answers every source line of each
validation_ds file pair, eval_batch_size sources per forward pass, at most max_tgt_seq_length tokens each. The
processes beyond TP split the questions between them. Rank 0 writes, under <run.results_dir>/results/:

    <name>_predictions.jsonl   {"source", "prediction", "target", "answers"} per question, in file order
    qa_metrics.json            {"<name>": {"exact_match", "f1", "examples"}, ..., "average": {...}} (metric squad)

and prints a table. The task files are local (nemo_launcher.jobs.t5.squad_data writes them from SQuAD-format JSON
first, as a separate command). Holds run.results_dir's lock. Exit codes: 0 done, 2 configuration error, 74 a
result could not be written (space, permission), 75 run.results_dir is in use by another job, else a crash.
"""
import json
import sys
import time
from pathlib import Path
from typing import Dict, List

PROG = "python3 -m nemo_launcher.jobs.t5.evaluate"


def evaluate(cfg, placement) -> Dict[str, dict]:
    """{file pair name: scores}, plus "average" for several pairs; every rank returns it."""
    import torch
    from megatron.core import parallel_state

    from ..common.qa_metrics import average_over_files
    from .scoring import SCORE_NAMES, score_answers
    from .generate import inference_ready
    from .standalone import load_t5_from_nemo
    from .text_pairs import PairEncoder, read_pairs
    from .tuning import answer_pairs

    model_section, section = cfg.model, cfg.model.data.validation_ds
    model, tokenizer = load_t5_from_nemo(model_section.restore_from_path, model_section.tensor_model_parallel_size, 1,
                                         model_section.precision_name())
    model = inference_ready(model)
    encoder = PairEncoder(tokenizer, section.max_src_seq_length, section.max_tgt_seq_length)
    dp_rank, dp_size = parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
    results: Dict[str, dict] = {}
    for index, (source, target, answers) in enumerate(zip(section.sources(), section.targets(), section.answers())):
        name = section.names[index] if section.names else Path(source).stem
        pairs = read_pairs(source, target, answers, key="evaluation.model.data.validation_ds")
        mine = list(range(dp_rank, len(pairs), dp_size))
        texts = answer_pairs(model, [pairs[i] for i in mine], encoder, model_section.eval_batch_size)
        predictions = _gathered(dict(zip(mine, texts)), placement.world_size)
        ordered = [predictions[i] for i in range(len(pairs))]
        examples, scores = score_answers(section.metric.name, ordered, pairs)
        results[name] = {**scores, "examples": examples}
        if placement.rank == 0:
            _write_predictions(cfg.predictions_file(name), pairs, ordered)
    if len(results) > 1:
        results["average"] = {score: average_over_files({k: (v["examples"], v[score]) for k, v in results.items()},
                                                        section.metric.average)
                              for score in SCORE_NAMES[section.metric.name]}
        results["average"]["examples"] = sum(v["examples"] for k, v in results.items() if k != "average")
    if placement.rank == 0:
        _write_json(cfg.results_file, results)
    if torch.distributed.is_initialized() and placement.world_size > 1:
        torch.distributed.barrier()
    return results


def _gathered(local: Dict[int, str], world_size: int) -> Dict[int, str]:
    """Every rank's {question index: prediction}, merged (tensor-parallel ranks hold the same ones)."""
    import torch

    if world_size == 1:
        return local
    everyone: List[Dict[int, str]] = [{} for _ in range(world_size)]
    torch.distributed.all_gather_object(everyone, local)
    return {index: text for part in everyone for index, text in part.items()}


def _advice(path: Path) -> str:
    return (f"Nothing was written to {path}. Free space there, or point evaluation.run.results_dir (or "
            "base_results_dir) at a larger file system, then run the evaluation again.")


def _write_predictions(path: Path, pairs: List[dict], predictions: List[str]) -> None:
    from ..common.storage import guarded_write

    lines = [json.dumps({"source": pair["source"], "prediction": text, "target": pair["target"], "answers": pair["answers"]},
                        ensure_ascii=False) for pair, text in zip(pairs, predictions)]
    _write_text(path, "".join(line + "\n" for line in lines), guarded_write)


def _write_json(path: Path, results: dict) -> None:
    from ..common.storage import guarded_write

    _write_text(path, json.dumps(results, indent=2, ensure_ascii=False) + "\n", guarded_write)


def _write_text(path: Path, text: str, guarded_write) -> None:
    """Written beside its place and renamed, so a reader never sees half a file."""
    data = text.encode("utf-8")
    with guarded_write(path.parent, len(data), path.name, _advice(path)):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(data)
        partial.replace(path)


def results_table(results: Dict[str, dict]) -> str:
    names = list(results)
    scores = [key for key in next(iter(results.values())) if key != "examples"]
    width = max(len(name) for name in names + ["task"])
    lines = [f"{'task'.ljust(width)}  " + "  ".join(f"{s:>18}" for s in scores) + f"  {'examples':>8}"]
    for name in names:
        row = results[name]
        lines.append(f"{name.ljust(width)}  " + "  ".join(f"{row[s]:>18.2f}" for s in scores) + f"  {row['examples']:>8}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
    from ..common.distributed import placement_from_env
    from ..common.quiet import start_job
    from ..common.report import JobFault, Summary, duration, print_error
    from ..common.run_directory import claimed
    from ...contract.schemas.t5_evaluation import QaEvaluationConfig

    started = time.monotonic()
    try:
        path = config_path_from_argv(argv, prog=PROG)
        placement = placement_from_env()
        start_job(placement.rank)
        cfg = QaEvaluationConfig.from_dict(load_resolved_config(path))
        with claimed(cfg.run.results_dir, placement.rank):
            try:
                results = evaluate(cfg, placement)
            finally:
                from ..core.parts import shutdown

                shutdown()
        if placement.rank == 0:
            print(results_table(results), flush=True)
        summary = Summary(f"evaluation finished: {cfg.model.restore_from_path}")
        summary.add("results", cfg.results_file).add("predictions", cfg.predictions_file("<name>"))
        summary.add("time", duration(time.monotonic() - started)).show(placement.rank)
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
