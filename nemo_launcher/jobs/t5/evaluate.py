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

import sys
from pathlib import Path

PROG = "python3 -m nemo_launcher.jobs.t5.evaluate"


def evaluate(cfg, placement) -> dict[str, dict]:
    """{file pair name: scores}, plus "average" for several pairs; every rank returns it."""
    import torch
    from megatron.core import parallel_state

    from ..core.qa_results import gathered, with_average, write_json
    from .generate import inference_ready
    from .scoring import SCORE_NAMES, score_answers
    from .standalone import load_t5_from_nemo
    from .text_pairs import PairEncoder, read_pairs
    from .tuning import answer_pairs

    model_section, section = cfg.model, cfg.model.data.validation_ds
    model, tokenizer = load_t5_from_nemo(
        model_section.restore_from_path, model_section.tensor_model_parallel_size, 1, model_section.precision_name()
    )
    model = inference_ready(model)
    encoder = PairEncoder(tokenizer, section.max_src_seq_length, section.max_tgt_seq_length)
    dp_rank, dp_size = parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
    results: dict[str, dict] = {}
    for index, (source, target, answers) in enumerate(zip(section.sources(), section.targets(), section.answers())):
        name = section.names[index] if section.names else Path(source).stem
        pairs = read_pairs(source, target, answers, key="evaluation.model.data.validation_ds")
        mine = list(range(dp_rank, len(pairs), dp_size))
        texts = answer_pairs(model, [pairs[i] for i in mine], encoder, model_section.eval_batch_size)
        predictions = gathered(dict(zip(mine, texts)), placement.world_size)
        ordered = [predictions[i] for i in range(len(pairs))]
        examples, scores = score_answers(section.metric.name, ordered, pairs)
        results[name] = {**scores, "examples": examples}
        if placement.rank == 0:
            _write_predictions(cfg.predictions_file(name), pairs, ordered)
    results = with_average(results, SCORE_NAMES[section.metric.name], section.metric.average)
    if placement.rank == 0:
        write_json(cfg.results_file, results, "evaluation")
    if torch.distributed.is_initialized() and placement.world_size > 1:
        torch.distributed.barrier()
    return results


def _write_predictions(path: Path, pairs: list[dict], predictions: list[str]) -> None:
    from ..core.qa_results import write_jsonl

    write_jsonl(
        path,
        (
            {"source": pair["source"], "prediction": text, "target": pair["target"], "answers": pair["answers"]}
            for pair, text in zip(pairs, predictions)
        ),
        "evaluation",
    )


def main(argv=None) -> int:
    from ...contract.schemas.t5_evaluation import QaEvaluationConfig
    from ..core.qa_results import run_evaluation

    return run_evaluation(argv, PROG, QaEvaluationConfig.from_dict, evaluate, lambda cfg: cfg.model.restore_from_path)


if __name__ == "__main__":
    sys.exit(main())
