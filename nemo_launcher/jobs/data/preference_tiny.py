"""The tiny rule-following preference set, generated and tokenized here in a second or two (no network).

    python3 -u -m nemo_launcher.jobs.data.preference_tiny --config <job dir>/<run.name>_hydra.yaml
    (the job of data_preparation=rlhf/tiny_preferences)

Comparisons come from contract/preference_data.py's tiny_comparisons: a response is better the larger its share of
agreeable words (its RULE; chance is 50%). For every split with a count it writes into output_dir:
<split>_pairs.jsonl (ranked lists of more than two responses expanded into every better-worse pair),
<split>_sft.jsonl, and for every split with prompts <split>_prompts.jsonl (PPO's prompts, drawn apart from the
comparisons); then corpus/preferences_text_document.{bin,idx}, prompt+response documents that training=gpt3/tiny
pre-trains on (run.preprocessed_dir=<output_dir>/corpus), and metadata.json last.
"""

import contextlib
import os
from collections.abc import Iterator

from ...contract import preference_data as pd
from ...contract.schemas.preference_preparation import TinyPreferencesConfig, corpus_prefix
from ..common.tokenizer import token_dtype
from ..steps.config import DataConfigError
from ..steps.step_report import StepReport
from .preference_records import tokenize_comparison
from .preference_set import load_preference_config, set_metadata, set_tokenizer
from .preference_writer import SplitWriter, begin_set, write_corpus, write_metadata, write_prompts


def _comparisons(cfg: TinyPreferencesConfig, count: int, seed: int) -> list[pd.Comparison]:
    return pd.tiny_comparisons(count, seed, cfg.responses_per_prompt, cfg.words_per_response)


def corpus_documents(cfg: TinyPreferencesConfig, tokenizer) -> Iterator[list[int]]:
    """Each response of the corpus comparisons after its prompt, as one text (what "{input} {output}" makes of an
    SFT line), ending with eod: the format a policy pre-trained on it writes."""
    for comparison in _comparisons(cfg, cfg.corpus_comparisons, cfg.corpus_seed()):
        for response in comparison.responses:
            yield tokenizer.encode(comparison.prompt + response) + [tokenizer.eod]


def write_tiny_set(cfg: TinyPreferencesConfig, report: StepReport | None = None) -> dict:
    """Writes the set into cfg.output_dir; returns its metadata."""
    tokenizer = set_tokenizer(cfg)
    directory = cfg.output_dir
    begin_set(directory)
    splits: dict[str, dict[str, int]] = {}
    for split, count in cfg.comparisons.items():
        seed = cfg.split_seed(split)
        with SplitWriter(directory, split, cfg.sft_responses, prompts_from_pairs=False) as writer:
            for index, comparison in enumerate(_comparisons(cfg, count, seed)):
                writer.add(tokenize_comparison(comparison, tokenizer, f"tiny_comparisons(seed={seed})[{index}]"))
        splits[split] = {name: value for name, value in writer.counts.items() if name != "too_long"}
    for split, count in cfg.prompts.items():
        texts = pd.tiny_prompts(count, cfg.prompt_seed(split))
        splits.setdefault(split, {})["prompts"] = write_prompts(directory, split, texts, tokenizer)
    metadata = set_metadata(cfg, tokenizer, splits)
    prefix = corpus_prefix(directory)
    if cfg.corpus_comparisons:
        documents, tokens = write_corpus(prefix, corpus_documents(cfg, tokenizer), token_dtype(tokenizer.vocab_size))
        metadata["corpus"] = {"prefix": prefix, "documents": documents, "tokens": tokens}
        if report is not None:
            report.done("corpus", output=f"{prefix}.bin", documents=documents, tokens=tokens)
    else:
        for suffix in (".bin", ".idx"):  # an earlier run's corpus is not this set's
            with contextlib.suppress(FileNotFoundError):
                os.remove(prefix + suffix)
        with contextlib.suppress(OSError):  # its folder too, unless something else is kept there
            os.rmdir(os.path.dirname(prefix))
    metadata.update(
        rule=pd.RULE,
        chance=0.5,
        responses_per_prompt=cfg.responses_per_prompt,
        words_per_response=cfg.words_per_response,
        seed=cfg.seed,
    )
    write_metadata(directory, metadata)
    if report is not None:
        for split in splits:
            report.done(split, output=pd.pairs_file(directory, split))
    return metadata


def main(argv=None) -> StepReport:
    cfg = load_preference_config(argv, "preference_tiny")
    if not isinstance(cfg, TinyPreferencesConfig):
        raise DataConfigError(f"data_preparation.dataset={cfg.dataset!r}: this step writes tiny_preferences only")
    report = StepReport("preference_tiny", unit="part")
    metadata = write_tiny_set(cfg, report)
    report.note("pairs", ", ".join(f"{split} {count}" for split, count in metadata["pairs"].items()))
    report.note("prompts", ", ".join(f"{split} {count}" for split, count in metadata["prompts"].items()))
    report.note("rule", f"{pd.RULE}; chance 50%")
    return report


if __name__ == "__main__":
    from ..steps.config import run_step

    run_step(main)
