"""Evaluation of a GPT tuned by prompt learning, adapters or IA3: greedy answers of the frozen base with the method's
result file, scored by SQuAD's exact match and F1 (evaluation=prompt_gpt3/squad, adapter_gpt3/squad, ia3_gpt3/squad).

    python3 -u -m nemo_launcher.jobs.gpt.evaluate_tuned --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.evaluate_tuned --config ...     (TP, or copies sharing lines)

Reads the resolved `evaluation` section (contract/schemas/tuned_evaluation.py); tuning/tuned_evaluation.py does
the work with the GPT side below (the base .nemo resharded to this TP, prompt and answer in one sequence, several
lines per forward pass) and writes <test file name>_predictions.jsonl and qa_metrics.json under
<run.results_dir>/results/, then prints a table. Exit codes: 0 done, 2 configuration error, 74 a result could not
be written, 75 run.results_dir is in use by another job, else a crash.
"""

import sys
from typing import Any

import torch

PROG = "python3 -m nemo_launcher.jobs.gpt.evaluate_tuned"


class GptSide:
    """What a GPT does in common/tuned_evaluation.evaluate_tuned: the prompt and then the answer in one sequence."""

    @staticmethod
    def load(m):
        from ..core.nemo_archive import read_nemo_config
        from .inference import load_gpt_from_nemo

        model, tokenizer = load_gpt_from_nemo(
            m.language_model_path, m.tensor_model_parallel_size, 1, m.precision_name()
        )
        base = read_nemo_config(m.language_model_path)
        return model, tokenizer, int(base.get("max_position_embeddings") or base["encoder_seq_length"])

    @staticmethod
    def encoder(tokenizer, layout):
        from ..tuning.prompt_data import TemplateEncoder

        return TemplateEncoder(tokenizer, layout, add_eos=False)

    @staticmethod
    def room(m) -> int:
        return m.tokens_to_generate  # the answer follows the prompt within the model's positions

    @staticmethod
    def check(batch, path: str, m, max_length: int) -> None:
        from ..common.config import JobConfigError

        for number, ids, _, _ in batch:
            if len(ids) + m.tokens_to_generate > max_length:
                raise JobConfigError(
                    f"{path}:{number + 1}: its prompt takes {len(ids)} tokens; with "
                    f"evaluation.model.tokens_to_generate {m.tokens_to_generate} that exceeds the "
                    f"model's {max_length} positions: lower tokens_to_generate, or give the task "
                    f"template a truncate_field"
                )

    @staticmethod
    def answer(model, tokenizer, batch, prompts, m) -> list[list[int]]:
        from ..core.nemo_archive import read_nemo_config
        from ..tuning.tuned_evaluation import virtual_placement
        from .generate import greedy_generate_batch

        def place(tokens: torch.Tensor) -> None:  # before each forward: as wide as the tokens so far
            prompts.place(*virtual_placement(batch, tokens.shape[1], tokens.device))

        base = read_nemo_config(m.language_model_path)
        max_length = int(base.get("max_position_embeddings") or base["encoder_seq_length"])
        return greedy_generate_batch(
            model,
            [ids for _, ids, _, _ in batch],
            m.tokens_to_generate,
            tokenizer.eod,
            tokenizer.vocab_size,
            max_length,
            place if prompts is not None else None,
        )


def evaluate(cfg, placement) -> dict[str, dict]:
    from ..tuning.tuned_evaluation import evaluate_tuned

    return evaluate_tuned(cfg, placement, GptSide)


def schema_for(section: dict[str, Any]):
    """The seed's two layouts: prompt_gpt3's nemo_model / prompt_dataset_paths, or the others' data.test_ds."""
    from ...contract.schemas.tuned_evaluation import PromptGptEvaluationConfig, TunedEvaluationConfig

    model = section.get("model") if isinstance(section, dict) else None
    return PromptGptEvaluationConfig if isinstance(model, dict) and "nemo_model" in model else TunedEvaluationConfig


def main(argv: list[str] | None = None) -> int:
    from ..core.qa_results import run_evaluation

    return run_evaluation(
        argv,
        PROG,
        lambda section: schema_for(section).from_dict(section),
        evaluate,
        lambda cfg: f"{cfg.model.method_file} on {cfg.model.language_model_path}",
    )


if __name__ == "__main__":
    sys.exit(main())
