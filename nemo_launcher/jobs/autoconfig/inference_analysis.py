"""Ranks the settings of an AutoConfigurator GPT inference search by measured throughput: final_output.csv.

    python3 -u -m nemo_launcher.jobs.autoconfig.inference_analysis --manifest <r>/inference/inference_manifest.json

Runs after every setting ended, however it ended (Slurm: afterany on the array). Each setting is read from its own
directory only: the benchmark's inference_result.json and the status files (contract/autoconfig_inference.py); a
Slurm array task that left neither is explained by its own logs (time limit, out-of-memory kill, last error line),
as the training analysis does. So a crash shifts no other setting's numbers, and the order is by measured tokens per
second whatever order the settings ended in. Writes <results>/inference/final_summary/final_output.csv (measured
settings fastest first, then the failed ones with their reason) and prints, for each measured latency, the setting
with the highest throughput within it (the settings no other beats on both).
Exit codes: 0 written (even when settings failed), 1 no setting measured anything (the file still says why).
"""

import argparse
import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from ...contract.autoconfig_inference import RESULT_FILE, InferenceSetting, read_inference_manifest
from ...contract.autoconfig_search import FAILURE_PREFIX, STATUS_FILE, read_json
from .analysis import item_logs, reason_in_logs, write_file

SUMMARY_FILE = "final_output.csv"
COLUMNS = (
    "rank",
    "name",
    "tp",
    "pp",
    "batch_size",
    "input_len",
    "output_len",
    "throughput_tokens_per_s",
    "latency_s",
    "first_token_latency_s",
    "status",
)


@dataclass(frozen=True)
class Measured:
    setting: InferenceSetting
    result: dict | None  # inference_result.json; None when it failed
    failure: str | None  # why it has no numbers (None: measured)

    @property
    def throughput(self) -> float:
        return float(self.result["tokens_per_s"])

    @property
    def latency(self) -> float:
        return float(self.result["latency_s"])


def _current(path: Path, since: float) -> bool:
    """A file this search wrote: not older than its manifest. A rerun of the search into the same folders leaves the
    files of the run before it in place until each setting starts again; those must not count as this run's."""
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


def outcome_of(setting: InferenceSetting, logs_dir: Path, since: float = 0.0) -> Measured:
    """since: the manifest's modification time (seconds since the epoch); older files are ignored."""
    folder = Path(setting.run_dir)
    result = read_json(folder / RESULT_FILE) if _current(folder / RESULT_FILE, since) else None
    if result is not None:
        return Measured(setting, result, None)
    found = [read_json(path) for path in sorted(folder.glob(f"{FAILURE_PREFIX}*.json")) if _current(path, since)]
    failures = [record for record in found if record is not None]
    status = read_json(folder / STATUS_FILE) if _current(folder / STATUS_FILE, since) else None
    if failures:
        reasons = [record.get("reason", "error") for record in failures]
        failure = next((reason for reason in reasons if reason.startswith("out of memory")), reasons[0])
    elif status is not None and status.get("state") == "failed":
        failure = status.get("reason") or f"error: exited with status {status.get('exit_code')}"
    else:
        failure = reason_in_logs([path for path in item_logs(logs_dir, setting.item) if _current(path, since)])
        if failure is None:
            failure = (
                "never started: no status and no result (cancelled, or still queued)"
                if status is None
                else "error: ended without a word (killed?) before it measured"
            )
    return Measured(setting, None, failure)


def ranked(outcomes: list[Measured]) -> list[Measured]:
    """Measured settings by throughput, highest first (ties by name), then the failed ones by item."""
    good = sorted((o for o in outcomes if o.failure is None), key=lambda o: (-o.throughput, o.setting.name))
    return good + sorted((o for o in outcomes if o.failure is not None), key=lambda o: o.setting.item)


def _number(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def summary_csv(outcomes: list[Measured], benchmark) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for rank, outcome in enumerate(outcomes, start=1):
        setting, result = outcome.setting, outcome.result or {}
        writer.writerow(
            (
                rank if outcome.failure is None else "",
                setting.name,
                setting.tp,
                setting.pp,
                setting.batch_size,
                benchmark.input_len,
                benchmark.output_len,
                _number(result.get("tokens_per_s")),
                _number(result.get("latency_s")),
                _number(result.get("first_token_latency_s")),
                "measured" if outcome.failure is None else f"failed: {outcome.failure}",
            )
        )
    return out.getvalue()


def best_within_latency(measured: list[Measured]) -> list[Measured]:
    """The settings no other beats on both throughput and latency, quickest first: for a latency budget, the
    last of them within it has the highest throughput."""
    front: list[Measured] = []
    for outcome in sorted(measured, key=lambda o: (o.latency, -o.throughput, o.setting.name)):
        if not front or outcome.throughput > front[-1].throughput:
            front.append(outcome)
    return front


def analyse(manifest_path: str) -> int:
    manifest = read_inference_manifest(manifest_path)
    since = Path(manifest_path).stat().st_mtime
    outcomes = ranked([outcome_of(setting, Path(manifest_path).parent, since) for setting in manifest.settings])
    path = Path(manifest.final_summary) / SUMMARY_FILE
    write_file(path, summary_csv(outcomes, manifest.benchmark))
    measured = [o for o in outcomes if o.failure is None]
    lines = [
        f"Inference search of {manifest.model_name}: {len(measured)} of {len(outcomes)} settings measured ({path})"
    ]
    for outcome in best_within_latency(measured):
        lines.append(
            f"  within {outcome.latency:.4g} s per batch: {outcome.setting.name} at {outcome.throughput:.4g} tokens/s"
        )
    lines += [f"  failed: {o.setting.name}: {o.failure}" for o in outcomes if o.failure is not None]
    print("\n".join(lines), flush=True)
    return 0 if measured else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m nemo_launcher.jobs.autoconfig.inference_analysis")
    parser.add_argument("--manifest", required=True, help="the search's inference_manifest.json")
    return analyse(parser.parse_args(argv).manifest)


if __name__ == "__main__":
    sys.exit(main())
