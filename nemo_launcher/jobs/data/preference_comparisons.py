"""Local comparison jsonl files converted into the preference format the RLHF stages read (nothing is downloaded).

    python3 -u -m nemo_launcher.jobs.data.preference_comparisons --config <job dir>/<run.name>_hydra.yaml
    (the job of data_preparation=rlhf/comparisons)

Reads each split's files in order (inputs.train, inputs.validation, inputs.test), in any of the formats of
preference_sources.py (prompt/chosen/rejected, ranked lists, the seed's {"text"} line pairs, Anthropic HH-RLHF), and
writes into output_dir per split: <split>_pairs.jsonl, <split>_prompts.jsonl (the pairs' prompts, each once: PPO's
prompts), <split>_sft.jsonl, then metadata.json (tokenizer, counts, source files, lines skipped). A bad line stops
the step naming file:line and why (on_malformed=fail), or is reported and counted (skip).
"""

import logging

from ...contract import preference_data as pd
from ...contract.schemas.preference_preparation import ComparisonsConfig
from ..steps.config import DataConfigError
from ..steps.step_report import StepReport
from .preference_records import MalformedComparison
from .preference_set import load_preference_config, set_metadata, set_tokenizer
from .preference_sources import read_comparisons
from .preference_writer import SplitWriter, begin_set, write_metadata

log = logging.getLogger("data.preference_comparisons")
# Bad lines named one by one in the log before only their count is kept.
_SHOWN_BAD_LINES = 20


class BadLines:
    """on_malformed: fail raises the first bad line's error; skip logs the first few and counts all."""

    def __init__(self, on_malformed: str):
        self.on_malformed = on_malformed
        self.count = 0

    def __call__(self, error: MalformedComparison) -> None:
        if self.on_malformed == "fail":
            raise DataConfigError(
                f"{error} (data_preparation.on_malformed=skip leaves such lines out and counts them)"
            ) from None
        self.count += 1
        if self.count <= _SHOWN_BAD_LINES:
            log.warning("skipped %s", error)


def convert(cfg: ComparisonsConfig, report: StepReport | None = None) -> dict:
    """Writes the set into cfg.output_dir; returns its metadata."""
    tokenizer = set_tokenizer(cfg)
    directory = cfg.output_dir
    begin_set(directory)
    splits: dict[str, dict[str, int]] = {}
    for split, paths in cfg.inputs.items():
        bad = BadLines(cfg.on_malformed)
        with SplitWriter(directory, split, cfg.sft_responses, cfg.max_seq_length) as writer:
            for path in paths:
                try:
                    for record in read_comparisons(path, tokenizer, cfg.format, bad):
                        writer.add(record)
                except FileNotFoundError:
                    raise DataConfigError(f"data_preparation.inputs.{split}: {path} does not exist") from None
                except UnicodeDecodeError as error:
                    raise DataConfigError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
        if not writer.counts["pairs"]:
            raise DataConfigError(
                f"data_preparation.inputs.{split}={paths}: no comparison pair was left"
                + (f" ({bad.count} bad lines skipped)" if bad.count else "")
                + (f" ({writer.counts['too_long']} longer than max_seq_length)" if writer.counts["too_long"] else "")
            )
        splits[split] = writer.counts | {"skipped_lines": bad.count}
        if report is not None:
            report.done(split, output=pd.pairs_file(directory, split))
    metadata = set_metadata(cfg, tokenizer, splits)
    metadata.update(
        sources={split: list(paths) for split, paths in cfg.inputs.items()},
        format=cfg.format,
        max_seq_length=cfg.max_seq_length,
    )
    write_metadata(directory, metadata)
    return metadata


def main(argv=None) -> StepReport:
    cfg = load_preference_config(argv, "preference_comparisons")
    if not isinstance(cfg, ComparisonsConfig):
        raise DataConfigError(f"data_preparation.dataset={cfg.dataset!r}: this step converts comparisons only")
    report = StepReport("preference_comparisons", unit="split")
    metadata = convert(cfg, report)
    for name in ("comparisons", "pairs", "prompts", "sft", "too_long", "skipped_lines"):
        if any(metadata[name].values()):
            report.note(name, ", ".join(f"{split} {count}" for split, count in metadata[name].items()))
    return report


if __name__ == "__main__":
    from ..steps.config import run_step

    run_step(main)
