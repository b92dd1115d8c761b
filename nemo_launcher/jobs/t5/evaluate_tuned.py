"""Evaluation of a T5 or mT5 tuned by prompt learning, adapters or IA3: greedy answers of the frozen base with the
method's result file, scored by SQuAD's exact match and F1 (evaluation=prompt_t5/squad, prompt_mt5/squad,
adapter_t5/squad, ia3_t5/squad).

    python3 -u -m nemo_launcher.jobs.t5.evaluate_tuned --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.t5.evaluate_tuned --config ...     (TP, or copies sharing lines)

Reads the resolved `evaluation` section (contract/schemas/tuned_evaluation.py); tuning/tuned_evaluation.py does
the work with the T5 side below: the base .nemo resharded to this TP, each line's prompt (virtual tokens, fields,
eos) as the encoder's input, the answer decoded greedily (generate.py). It writes <test file name>_predictions.jsonl
and qa_metrics.json under <run.results_dir>/results/ and prints a table. Exit codes: 0 done, 2 configuration error,
74 a result could not be written, 75 run.results_dir is in use by another job, else a crash.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.t5.evaluate_tuned"


class T5Side:
    """What a T5 does in common/tuned_evaluation.evaluate_tuned: the prompt is the encoder's, the answer the
    decoder's."""

    def __init__(self):
        self._ready = None  # the base as generation runs it (inside Float16Module in bf16/fp16)

    def load(self, m):
        from ..core.nemo_archive import read_nemo_config
        from .standalone import load_t5_from_nemo

        model, tokenizer = load_t5_from_nemo(m.language_model_path, m.tensor_model_parallel_size, 1, m.precision_name())
        base = read_nemo_config(m.language_model_path)
        self.positions = int(base.get("max_position_embeddings") or base["encoder_seq_length"])
        self.learned_positions = base.get("position_embedding_type", "learned_absolute") == "learned_absolute"
        return model, tokenizer, self.positions

    @staticmethod
    def encoder(tokenizer, layout):
        from .prompt_data import T5TemplateEncoder

        return T5TemplateEncoder(tokenizer, layout, add_eos=False)

    @staticmethod
    def room(m) -> int:
        return 0  # the answer has the decoder's positions to itself

    def check(self, batch, path: str, m, max_length: int) -> None:
        from ..common.config import JobConfigError

        if self.learned_positions and m.tokens_to_generate + 1 > max_length:
            raise JobConfigError(
                f"evaluation.model.tokens_to_generate: {m.tokens_to_generate} (after bos) exceeds the "
                f"model's {max_length} decoder positions; lower it"
            )

    def answer(self, model, tokenizer, batch, prompts, m) -> list[list[int]]:
        from ..tuning.tuned_evaluation import virtual_placement
        from .generate import greedy_answers, inference_ready

        if self._ready is None:
            self._ready = inference_ready(model)
        sources = [ids for _, ids, _, _ in batch]
        if prompts is not None:  # the encoder's embedding call, the first of the generation, takes them
            prompts.place(*virtual_placement(batch, max(len(ids) for ids in sources), next(model.parameters()).device))
        return greedy_answers(self._ready, sources, tokenizer, m.tokens_to_generate)


def evaluate(cfg, placement) -> dict[str, dict]:
    from ..tuning.tuned_evaluation import evaluate_tuned

    return evaluate_tuned(cfg, placement, T5Side())


def main(argv: list[str] | None = None) -> int:
    from ...contract.schemas.tuned_evaluation import TunedEvaluationConfig
    from ..core.qa_results import run_evaluation

    return run_evaluation(
        argv,
        PROG,
        TunedEvaluationConfig.from_dict,
        evaluate,
        lambda cfg: f"{cfg.model.method_file} on {cfg.model.language_model_path}",
    )


if __name__ == "__main__":
    sys.exit(main())
