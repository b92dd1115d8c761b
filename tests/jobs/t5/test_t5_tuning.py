"""T5 fine-tuning on the trainer core (nemo_launcher.jobs.t5.finetune), on a tiny T5 .nemo and a tiny QA task made here:
the loss falls and the tuned .nemo is written; kill -9, then a SIGTERM stop, then a rerun end bit-identical to an
uninterrupted run; greedy generation answers each source as it would alone."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require_module

torch = require_module("torch")

from tests.jobs.gpt_train_support import REPO, command, environment, losses, run_training  # noqa: E402
from tests.jobs.t5_tuning_support import finetune_config, results_dir, tiny_t5_nemo, tuned_nemo, write_task  # noqa: E402

RUN = [
    "trainer.max_steps=12",
    "trainer.val_check_interval=6",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=4",
    "exp_manager.checkpoint_callback_params.save_top_k=-1",
    "model.hidden_dropout=0.1",
]  # dropout: RNG must resume too
PROGRAM = ("nemo_launcher.jobs.t5.finetune",)


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_t5")
    return tiny_t5_nemo(folder), write_task(folder / "task")


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory, tiny_t5):
    work = tmp_path_factory.mktemp("finetune_whole")
    result = run_training(finetune_config(work, *tiny_t5, RUN), program=PROGRAM, timeout=600)
    return work, result


def _state(path) -> dict:
    from nemo_launcher.jobs.t5.standalone import load_t5_nemo

    return load_t5_nemo(path)[1]


def test_loss_falls_and_the_tuned_nemo_differs_from_the_base(uninterrupted, tiny_t5):
    work, result = uninterrupted
    trace = losses(result.stdout)
    assert sorted(trace) == list(range(1, 13))
    assert trace[12] < 0.8 * trace[1], trace
    assert "validation step=12 val_loss=" in result.stdout and "val_exact_string_match=" in result.stdout
    assert "warning" not in (result.stdout + result.stderr).lower()
    tuned, base = _state(tuned_nemo(work)), _state(tiny_t5[0])
    assert tuned.keys() == base.keys()
    assert any(not torch.equal(tuned[k], base[k]) for k in base)
    assert list(results_dir(work).glob("events.out.tfevents.*")), "TensorBoard events are written"
    assert f"fine-tuned model        {tuned_nemo(work)}" in result.stdout


def _wait_for(path: Path, process, log: Path, timeout_s: float = 400) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"{path} never appeared (exit {process.returncode}):\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


def _start(config: Path, log: Path) -> subprocess.Popen:
    handle = open(log, "w")
    return subprocess.Popen(
        command(config, program=PROGRAM, warm=False),
        cwd=REPO,
        env=environment(),
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_kill_9_then_sigterm_then_rerun_ends_bit_identical(tmp_path, uninterrupted, tiny_t5):
    config = finetune_config(tmp_path, *tiny_t5, RUN)
    checkpoints = results_dir(tmp_path) / "checkpoints"

    log = tmp_path / "killed.log"
    process = _start(config, log)
    _wait_for(checkpoints / "step-4" / "COMPLETE", process, log)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    log = tmp_path / "stopped.log"
    process = _start(config, log)
    while "step=9/12" not in log.read_text():  # resumed from step-4 (or step-8), now past step-8
        assert process.poll() is None, log.read_text()[-4000:]
        time.sleep(0.02)  # the last three steps take a fraction of a second: signal before they are done
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=300) == 0, log.read_text()[-4000:]
    stopped = log.read_text()
    assert "resuming from" in stopped and "stopping after step=" in stopped
    assert (results_dir(tmp_path) / "RESUME_NEEDED").exists()
    assert not tuned_nemo(tmp_path).exists(), "the model is written once max_steps is reached"

    result = run_training(config, program=PROGRAM, timeout=600)
    assert "resuming from" in result.stdout
    whole = losses(uninterrupted[1].stdout)
    resumed = losses(result.stdout)
    assert resumed and all(resumed[step] == whole[step] for step in resumed), (resumed, whole)
    expected, got = _state(tuned_nemo(uninterrupted[0])), _state(tuned_nemo(tmp_path))
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected), (
        "resumed weights differ from the uninterrupted run's"
    )
    assert not (results_dir(tmp_path) / "RESUME_NEEDED").exists()


def test_batched_greedy_answers_equal_one_at_a_time_and_teacher_forcing(tiny_t5):
    from nemo_launcher.jobs.t5.generate import greedy_answers
    from nemo_launcher.jobs.t5.recipe import attention_masks
    from nemo_launcher.jobs.t5.standalone import load_t5_from_nemo

    model, tokenizer = load_t5_from_nemo(tiny_t5[0])
    sources = [
        tokenizer.encode(text) + [tokenizer.eos]
        for text in (
            "the river is green .",
            "question : what colour is the stone ? context : the stone is red .",
            "door",
        )
    ]
    together = greedy_answers(model, sources, tokenizer, max_new_tokens=5)
    assert together == [greedy_answers(model, [ids], tokenizer, max_new_tokens=5)[0] for ids in sources]
    assert any(together), "a random model that ends every answer at once would make this weak"
    # Feeding an answer back as decoder input, the model's argmax at every position is the answer's next token.
    for source, answer in zip(sources, together):
        decoder = torch.tensor([[tokenizer.bos] + answer])
        encoder = torch.tensor([source])
        batch = {"enc_mask": torch.ones_like(encoder), "dec_mask": torch.ones_like(decoder)}
        with torch.no_grad():
            logits = model(encoder, decoder, *attention_masks(batch, transformer_engine=False))
        predicted = logits[0, :, : tokenizer.vocab_size].argmax(-1).tolist()
        assert predicted[: len(answer)] == answer
