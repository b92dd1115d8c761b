"""Ranks an AutoConfigurator search's candidates by measured time per step and writes final_result/.

    python3 -u -m nemo_launcher.jobs.autoconfig.analysis --manifest <logs>/training_logs/search_manifest.json

Runs after every candidate ended, however it ended (Slurm: afterany on the array). Each candidate is read from its
own run directory only: the trainer's measured_steps.json (the step time of its last logged window, which leaves
out the first steps' warm-up, and its peak memory) and the candidate's status files (contract/autoconfig_search.py);
a Slurm array task's own logs (named after its index) tell a time limit or an out-of-memory kill that left no
status behind. So a candidate that crashed before writing anything is reported as failed and shifts no one else's
numbers, and the ranking is by measured step time whatever order the runs finished in. Writes:

    final_result/final_summary_<N>nodes.csv        every candidate: measured runs fastest first, predicted and
                                                    measured side by side; then the failed ones with their reason
    final_result/top_<n>_configs_<N>nodes.log      the output_top_n fastest, and how well the prediction ranked them
    final_result/optimal_config_<size>b_<N>nodes.yaml   the fastest layout as a training config (also under
                                                    <logs>/conf/training/<family>/, which main.py reads with
                                                    --config-dir), and the command that trains it
Exit codes: 0 written (even when candidates failed), 1 no candidate measured a step (the files still say why).
"""

import argparse
import csv
import io
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from ...contract.autoconfig_search import STATUS_FILE, CandidateRun, failures_in, read_json, read_manifest
from ...contract.measured_steps import read_measured_steps

_LOG_WORDS = (
    ("DUE TO TIME LIMIT", "time limit: Slurm ended the task at its time limit before it measured a step"),
    ("oom-kill", "out of memory: the node's out-of-memory killer ended the task"),
    ("OutOfMemoryError", "out of memory"),
)


@dataclass(frozen=True)
class Outcome:
    run: CandidateRun
    step_time_s: float | None  # measured: the last logged window's mean seconds per step
    tokens_per_s: float | None
    peak_memory_gib: float | None  # the GPU's peak allocated memory, or the process's peak RSS off GPUs
    steps: int | None  # the last step measured
    failure: str | None  # why it has no usable measurement (None: measured)


def item_logs(logs_dir: Path, item: int) -> list[Path]:
    """A Slurm array task's logs: log-<name>_<array job>_<item>_attempt<n>.out/.err (its own index in the name)."""
    pattern = re.compile(rf"_\d+_{item}_attempt\d+\.(out|err)$")
    return sorted(path for path in logs_dir.glob("log-*") if pattern.search(path.name))


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b.*$", re.M)


def reason_in_logs(logs: list[Path]) -> str | None:
    """Why a task that left no status ended, from its own logs: a time limit, an out-of-memory kill, the last
    error line of a crash (one that died before the candidate program could write anything)."""
    texts = []
    for path in logs:
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError:
            continue
    for words, reason in _LOG_WORDS:
        if any(words in text for text in texts):
            return reason
    errors = [match.group(0).strip() for text in texts for match in _ERROR_LINE.finditer(text)]
    if errors:
        return f"error: {errors[-1][:300]}"
    if texts:
        return f"error: ended before writing its status or a step (see {logs[0]})"
    return None


def outcome_of(run: CandidateRun, logs_dir: Path) -> Outcome:
    measured = read_measured_steps(run.run_dir)
    status = read_json(Path(run.run_dir) / STATUS_FILE)
    failures = failures_in(run.run_dir)
    failure = None
    if failures:
        reasons = [record.get("reason", "error") for record in failures]
        failure = next((reason for reason in reasons if reason.startswith("out of memory")), reasons[0])
    elif status is not None and status.get("state") == "failed":
        failure = status.get("reason") or f"error: exited with status {status.get('exit_code')}"
    elif measured is None:
        found = reason_in_logs(item_logs(logs_dir, run.item))
        if found is not None:
            failure = found
        elif status is None:
            failure = "never started: no status and no measurement (cancelled, or still queued)"
        elif status.get("state") == "started":
            failure = "error: ended without a word (killed?) before it measured a step"
        else:
            failure = "error: finished without measuring a step (max_steps_per_run below trainer.log_every_n_steps?)"
    if measured is None:
        return Outcome(run, None, None, None, None, failure)
    memory = measured.get("peak_memory_gib")
    return Outcome(
        run,
        float(measured["step_time_s"]),
        measured.get("tokens_per_s"),
        memory if memory is not None else measured.get("peak_rss_gib"),
        measured.get("step"),
        failure,
    )


def ranked(outcomes: list[Outcome]) -> tuple[list[Outcome], list[Outcome]]:
    """(measured runs fastest first, ties by name; failed runs by item)."""
    good = sorted((o for o in outcomes if o.failure is None), key=lambda o: (o.step_time_s, o.run.name))
    bad = sorted((o for o in outcomes if o.failure is not None), key=lambda o: o.run.item)
    return good, bad


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on the ranks); None below 3 points or with a constant side."""
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return None if vx == 0 or vy == 0 else cov / math.sqrt(vx * vy)


_COLUMNS = (
    "rank",
    "name",
    "tp",
    "pp",
    "vp",
    "cp",
    "mbs",
    "act_ckpt_layers",
    "measured_step_time_s",
    "predicted_step_time_s",
    "measured_samples_per_s",
    "measured_tokens_per_s",
    "measured_peak_memory_gib",
    "predicted_memory_per_gpu_gib",
    "steps_measured",
    "status",
)


def _number(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def summary_csv(good: list[Outcome], bad: list[Outcome], global_batch_size: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_COLUMNS)
    for rank, outcome in enumerate(good + bad, start=1):
        layout, predicted = outcome.run.layout, outcome.run.predicted
        measured = outcome.failure is None
        writer.writerow(
            (
                rank if measured else "",
                outcome.run.name,
                *(layout.get(key, "") for key in ("tp", "pp", "vp", "cp", "mbs", "act_ckpt_layers")),
                _number(outcome.step_time_s),
                _number(predicted.get("step_time_s")),
                _number(global_batch_size / outcome.step_time_s if outcome.step_time_s else None),
                _number(outcome.tokens_per_s),
                _number(outcome.peak_memory_gib),
                _number(predicted.get("memory_per_gpu_gib")),
                "" if outcome.steps is None else outcome.steps,
                "measured" if measured else f"failed: {outcome.failure}",
            )
        )
    return out.getvalue()


def correlation_line(good: list[Outcome]) -> str:
    pairs = [(o.run.predicted.get("step_time_s"), o.step_time_s) for o in good]
    pairs = [(p, m) for p, m in pairs if isinstance(p, (int, float))]
    rho = spearman([p for p, _ in pairs], [m for _, m in pairs])
    if rho is None:
        return f"Spearman rank correlation of predicted and measured step time: n/a ({len(pairs)} measured runs)"
    return f"Spearman rank correlation of predicted and measured step time: {rho:.3f} over {len(pairs)} runs"


def optimal_config_text(manifest, winner: Outcome) -> str:
    nested: dict = {}
    for key, value in winner.run.overrides.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    body = {"defaults": [f"/training/{manifest.base_config}@_here_", "_self_"], **nested}
    header = (
        f"# The fastest layout the AutoConfigurator measured for {manifest.family} {manifest.size_label} on "
        f"{manifest.num_nodes} nodes: {winner.step_time_s:.4g} s per step\n# (predicted "
        f"{_number(winner.run.predicted.get('step_time_s'))} s), {winner.run.name}. The base config holds the rest.\n"
    )
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=120)


def training_command(manifest, config_name: str) -> str:
    words = [
        "python3",
        "main.py",
        "--config-dir",
        manifest.conf_dir,
        "stages=[training]",
        f"training={config_name}",
        *manifest.launcher_settings,
    ]
    return " ".join(shlex.quote(word) for word in words)


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


def analyse(manifest_path: str) -> int:
    manifest = read_manifest(manifest_path)
    logs_dir = Path(manifest_path).parent
    good, bad = ranked([outcome_of(run, logs_dir) for run in manifest.runs])
    nodes, final = manifest.num_nodes, Path(manifest.final_result)
    write_file(final / f"final_summary_{nodes}nodes.csv", summary_csv(good, bad, manifest.global_batch_size))
    lines = [f"AutoConfigurator: {len(good)} of {len(manifest.runs)} candidates measured, fastest first"]
    for rank, outcome in enumerate(good[: manifest.output_top_n], start=1):
        lines.append(
            f"{rank:3d}. {outcome.run.name}: {outcome.step_time_s:.4g} s/step measured, "
            f"{_number(outcome.run.predicted.get('step_time_s'))} s predicted"
        )
    lines += [f"failed: {outcome.run.name}: {outcome.failure}" for outcome in bad]
    lines.append(correlation_line(good))
    if good:
        name = f"optimal_config_{manifest.size_label}_{nodes}nodes"
        text = optimal_config_text(manifest, good[0])
        write_file(final / f"{name}.yaml", text)
        write_file(Path(manifest.conf_dir) / "training" / manifest.family / f"{name}.yaml", text)
        lines += [
            f"Optimal config: {final / f'{name}.yaml'}",
            "Train it with:",
            "  " + training_command(manifest, f"{manifest.family}/{name}"),
        ]
    else:
        lines.append("No candidate measured a step: no optimal config (see the reasons above)")
    report = "\n".join(lines) + "\n"
    write_file(final / f"top_{manifest.output_top_n}_configs_{nodes}nodes.log", report)
    print(report, end="", flush=True)
    if not good:
        return 1
    if manifest.train_optimal_config:
        return train_winner(manifest, f"{manifest.family}/optimal_config_{manifest.size_label}_{nodes}nodes")
    return 0


def train_winner(manifest, config_name: str) -> int:
    """train_optimal_config: the search chained into training, by the command the summary prints (main.py in the
    launcher's folder, with this job's environment: on Slurm it submits the training job)."""
    words = shlex.split(training_command(manifest, config_name))
    words[1] = str(Path(manifest.launcher_scripts_path) / "main.py")
    print(f"Training the optimal config: {shlex.join(words)}", flush=True)
    return subprocess.run([sys.executable, *words[1:]], cwd=manifest.launcher_scripts_path).returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m nemo_launcher.jobs.autoconfig.analysis")
    parser.add_argument("--manifest", required=True, help="the search's search_manifest.json")
    return analyse(parser.parse_args(argv).manifest)


if __name__ == "__main__":
    sys.exit(main())
