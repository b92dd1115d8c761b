"""How job programs talk: ETAs and durations, the closing summary, the one `Error:` line, and the warning
filters that keep third-party noise (and only that) out of job logs. The quick start test checks the
real logs end to end (tests/test_quickstart.py)."""

import importlib
import logging
import os
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest

from nemo_launcher.jobs.common import quiet
from nemo_launcher.jobs.common.report import Summary, count, duration, eta, print_error, remaining_seconds, size
from nemo_launcher.jobs.steps.step_report import StepReport

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# ---- numbers people read ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (12.4, "12s"),
        (59.6, "1m00s"),
        (247, "4m07s"),
        (3 * 3600 + 5 * 60 + 9, "3h05m"),
        (5 * 86400 + 20 * 3600 + 59 * 60, "5d20h"),
        (None, "?"),
        (float("inf"), "?"),
        (float("nan"), "?"),
    ],
)
def test_eta_keeps_the_two_largest_units_without_spaces(seconds, text):
    assert eta(seconds) == text


def test_remaining_time_is_the_steps_left_at_the_recent_step_time():
    assert remaining_seconds(0.84, 120, 600_000) == pytest.approx(0.84 * 599_880)
    assert eta(remaining_seconds(0.84, 120, 600_000)) == "5d19h"
    assert remaining_seconds(0.5, 40, 40) == 0 and remaining_seconds(0.5, 45, 40) == 0


@pytest.mark.parametrize(
    "seconds, text", [(0, "0:00:00"), (31.4, "0:00:31"), (3599.6, "1:00:00"), (26 * 3600 + 3 * 60 + 4, "26:03:04")]
)
def test_durations_are_hours_minutes_seconds(seconds, text):
    assert duration(seconds) == text


def test_counts_and_sizes_are_short():
    assert [count(v) for v in (950, 999.7, 10_200, 1_234_567, 2.5e9)] == ["950", "1k", "10.2k", "1.23M", "2.5B"]
    assert [size(v) for v in (812, 82_000, 4.1e6, 999.9e6, 1.234e9)] == ["812 B", "82 kB", "4.1 MB", "1 GB", "1.23 GB"]


# ---- the summary ----------------------------------------------------------------------------------------
def test_summary_is_a_title_and_aligned_lines_without_the_missing_values(capsys):
    summary = Summary("training finished at step=40 of 40").add("steps", "40").add("val loss", None)
    summary.add("checkpoints", "/r/checkpoints")
    assert summary.text() == ("training finished at step=40 of 40\n  steps        40\n  checkpoints  /r/checkpoints")
    summary.show(rank=1)
    assert capsys.readouterr().out == ""  # only rank 0 (or a process working alone) reports
    summary.show(rank=None)
    assert capsys.readouterr().out == summary.text() + "\n"


def test_data_step_report_counts_done_and_kept_items():
    report = StepReport("preprocess")
    report.done(0, output="/d/pre/a_00_text_document", size_bytes=2_000_000, documents=60, tokens=18_000)
    report.kept(1, output="/d/pre/a_01_text_document", documents=40, tokens=12_000)
    text = report.summary(4.0).text()
    assert text.splitlines()[0] == "preprocess finished: 1 shard done, 1 already complete"
    assert "documents  100" in text and "tokens     30k" in text
    assert "input      2 MB (500 kB/s)" in text and "output     /d/pre" in text and "time       0:00:04" in text


def test_training_summary_says_why_it_stopped_and_that_it_resumes(tmp_path):
    from nemo_launcher.jobs.core.summary import TrainingOutcome, training_summary

    # The keys of the training section the summary reads.
    cfg = SimpleNamespace(
        trainer=SimpleNamespace(max_steps=40),
        exp_manager=SimpleNamespace(
            explicit_log_dir=str(tmp_path), create_checkpoint_callback=True, create_tensorboard_logger=True
        ),
    )
    outcome = TrainingOutcome(
        step=20,
        first_step=10,
        tokens=10_240,
        tokens_per_sec=1280.0,
        seconds=31.0,
        train_loss=5.83,
        train_loss_step=20,
        val_loss=5.91,
        test_loss=None,
        stop_reason="signal SIGUSR1 received",
        newest_checkpoint=tmp_path / "checkpoints" / "step-20",
    )
    text = training_summary(cfg, outcome).text()
    assert text.splitlines()[0] == (
        f"training stopped at step=20 of {cfg.trainer.max_steps}: signal SIGUSR1 received; "
        "the next attempt resumes from its checkpoint"
    )
    assert "10 this attempt (resumed from step 10)" in text and "10.2k (1.28k tokens/s)" in text
    assert "0:00:31" in text and "5.8300 (step 20)" in text and "(newest: step-20)" in text
    assert "test loss" not in text and f"TensorBoard  {tmp_path}" in text
    finished = training_summary(cfg, TrainingOutcome(**{**outcome.__dict__, "stop_reason": None, "first_step": 0}))
    assert finished.text().splitlines()[0] == f"training finished at step=20 of {cfg.trainer.max_steps}"


# ---- errors ---------------------------------------------------------------------------------------------
PROGRAMS = [
    "nemo_launcher.jobs.gpt.train",
    "nemo_launcher.jobs.gpt.convert",
    "nemo_launcher.jobs.bert.convert",
    "nemo_launcher.jobs.gpt.evaluate",
    "nemo_launcher.jobs.gpt.export",
    "nemo_launcher.jobs.gpt.finetune",
    "nemo_launcher.jobs.gpt.peft",
    "nemo_launcher.jobs.data.squad",
]
DATA_STEPS = ["download", "extract", "preprocess", "train_tokenizer"]


@pytest.mark.parametrize("module", PROGRAMS)
def test_a_config_error_is_one_error_line_and_exit_2(module, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(quiet.CHILD_WARNINGS_ENV, "")  # start_job sets it; restored after the test
    missing = tmp_path / "missing_hydra.yaml"
    assert importlib.import_module(module).main(["--config", str(missing)]) == 2
    assert capsys.readouterr().err == f"Error: --config {missing}: no such file\n"


@pytest.mark.parametrize("step", DATA_STEPS)
def test_a_data_step_config_error_is_one_error_line_and_exit_2(step, tmp_path, capsys, monkeypatch):
    from nemo_launcher.jobs.steps.config import run_step

    monkeypatch.setenv(quiet.CHILD_WARNINGS_ENV, "")
    monkeypatch.delenv("NEMO_LAUNCHER_FULL_ERROR", raising=False)
    missing = tmp_path / "missing_hydra.yaml"
    program = importlib.import_module(f"nemo_launcher.jobs.data.{step}")
    with pytest.raises(SystemExit) as exited:
        run_step(lambda: program.main(["--config", str(missing)]))
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"Error: --config {missing}: no such file\n"


def test_print_error_returns_the_exit_status(capsys):
    assert print_error(ValueError("model.x=1: must be 2")) == 2
    assert capsys.readouterr().err == "Error: model.x=1: must be 2\n"


# ---- warnings and loggers -------------------------------------------------------------------------------
def _shown(message: str, category, module: str) -> bool:
    """Whether a warning attributed to `module` gets through the filters start_job installs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        quiet.install_warning_filters()
        warnings.warn_explicit(message, category, filename=f"{module}.py", lineno=1, module=module)
    return bool(caught)


def test_known_third_party_noise_is_hidden_and_everything_else_shows():
    assert not _shown(
        "Transformer Engine and Apex are not installed. Falling back to Torch optimizers.",
        UserWarning,
        "megatron.core.optimizer",
    )
    assert not _shown(
        "Please use DTensor instead and we are deprecating ShardedTensor.",
        FutureWarning,
        "torch.distributed.checkpoint.planner_helpers",
    )
    # The same text from another package, another category, or another text from the same package: shown.
    assert _shown("Transformer Engine and Apex are not installed.", UserWarning, "nemo_launcher.jobs.gpt.model")
    assert _shown("Please use DTensor instead and we are deprecating ShardedTensor.", UserWarning, "torch.distributed")
    assert _shown("The attention mask is ignored", UserWarning, "megatron.core.transformer.attention")
    assert _shown("anything of ours", UserWarning, "nemo_launcher.jobs.gpt.train")
    # A package whose name only starts like a listed one is not that package.
    assert _shown("Apex is not installed", UserWarning, "megatron_corex")
    # Lightning's count of modules left in eval mode (frozen networks), whatever the count; its other warnings show.
    assert not _shown(
        "Found 154 module(s) in eval mode at the start of training. This may lead to unexpected "
        "behavior during training.",
        UserWarning,
        "pytorch_lightning.loops.fit_loop",
    )
    assert _shown(
        "Found keys that are in the model state dict but not in the checkpoint: ['w']",
        UserWarning,
        "pytorch_lightning.core.saving",
    )


def test_spawned_children_read_the_same_filters_and_the_users_own_win(tmp_path):
    env = {quiet.CHILD_WARNINGS_ENV: "error::ResourceWarning"}
    quiet.pass_filters_to_children(env)
    options = env[quiet.CHILD_WARNINGS_ENV].split(",")
    assert options[-1] == "error::ResourceWarning" and len(options) == len(set(options))
    script = (
        "import warnings\n"
        "warnings.warn('Transformer Engine and Apex are not installed. Falling back', UserWarning)\n"
        "warnings.warn('Please use DTensor instead and we are deprecating ShardedTensor.', FutureWarning)\n"
        "warnings.warn('a real problem', UserWarning)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **env), capture_output=True, text=True)
    assert child.returncode == 0
    assert "a real problem" in child.stderr and "Invalid -W option" not in child.stderr
    assert "Transformer Engine" not in child.stderr and "ShardedTensor" not in child.stderr


def test_noisy_loggers_keep_their_warnings_and_lose_their_chatter():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep()
    handler.addFilter(quiet._DropNoise())
    for name, level, message in [
        ("lightning.pytorch.utilities.rank_zero", logging.INFO, "GPU available: False, used: False"),
        ("lm_eval.evaluator", logging.INFO, "Building contexts for lambada on rank 0"),
        (
            "megatron.core.datasets.blended_dataset",
            logging.WARNING,
            "Cannot save the BlendedDataset indexes because path_to_cache is None",
        ),
        ("megatron.core.optimizer", logging.WARNING, "a megatron warning"),
        ("nemo_launcher.jobs.gpt", logging.INFO, "our own line"),
    ]:
        handler.handle(logging.LogRecord(name, level, __file__, 1, message, None, None))
    assert records == ["a megatron warning", "our own line"]


def test_absent_accelerators_are_reported_once_in_one_line(monkeypatch):
    said = []
    monkeypatch.setattr(quiet, "_reported_accelerators", False)
    monkeypatch.setattr(quiet, "absent_accelerators", lambda: ["transformer_engine", "apex"])
    line = quiet.report_absent_accelerators(say=said.append)
    assert quiet.report_absent_accelerators(say=said.append) is None
    assert said == [line] and "\n" not in line
    assert line.startswith("optional accelerators absent: transformer_engine, apex (")
    monkeypatch.setattr(quiet, "_reported_accelerators", False)
    monkeypatch.setattr(quiet, "absent_accelerators", lambda: [])
    assert quiet.report_absent_accelerators(say=said.append) is None and len(said) == 1


def test_only_rank_zero_reports_the_accelerators(monkeypatch, capsys):
    monkeypatch.setenv(quiet.CHILD_WARNINGS_ENV, "")
    monkeypatch.setattr(quiet, "absent_accelerators", lambda: ["apex"])
    for rank, expected in ((1, ""), (0, "optional accelerators absent: apex")):
        monkeypatch.setattr(quiet, "_reported_accelerators", False)
        with warnings.catch_warnings():
            quiet.start_job(rank)
        assert capsys.readouterr().out.startswith(expected)
