"""The trainer core with families other than GPT: the stand-in recipes of tests/jobs/core/recipe_doubles.py (a
T5-shaped encoder-decoder, a BERT-shaped model with two losses), run for real on the CPU as programs.

Judged as the GPT tests judge GPT: progress lines, summaries, TensorBoard events, checkpoints and the weights in
them, and an interrupted run that resumes onto the same losses and weights as an uninterrupted one.
"""

import shutil
from pathlib import Path

import pytest

from nemo_launcher.jobs.core.recipe import Recipe, Sequences, split_along_batch
from tests.jobs.gpt_train_support import log_dir, losses, run_training, step_losses, weights, write_config
from tests.jobs.pipeline_support import TINY_VOCAB_DIVISOR, build_data

# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP: 192 x TP=1 here and 96 x TP=2
# below give the same 2112-row table for the tiny BPE's 2,048 tokens, so the TP=1 and TP=2 runs start identical.
RUN = [
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
    f"model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR}",
]
ENCODER_DECODER = ("tests.jobs.core.recipe_doubles", "encoder_decoder")
TWO_LOSSES = ("tests.jobs.core.recipe_doubles", "two_losses")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("core_data")
    build_data(directory)
    return directory


def test_microbatches_cut_every_entry_of_a_batch():
    import torch

    batch = {
        "text_enc": torch.arange(24).view(4, 6),
        "enc_mask": torch.zeros(4, 1, 6, 6, dtype=torch.bool),
        "is_random": torch.tensor([0, 1, 1, 0]),
        "names": ["a", "b", "c", "d"],
    }
    first, second = split_along_batch(batch, 2)
    assert first["text_enc"].tolist() == [list(range(6)), list(range(6, 12))]
    assert second["is_random"].tolist() == [1, 0] and second["names"] == ["c", "d"]
    assert first["enc_mask"].shape == (2, 1, 6, 6) and first["text_enc"].data_ptr() == batch["text_enc"].data_ptr()
    assert Sequences(128, 64).tokens == 192 and Sequences(512).tokens == 512
    with pytest.raises(ValueError, match="at least one loss"):
        Recipe(
            megatron_modules=(),
            transformer_config=None,
            build_chunk=None,
            build_datasets=None,
            forward_step=None,
            loss_names=(),
        )


def test_an_encoder_decoder_counts_both_stacks_and_resumes_exactly(data_dir, tmp_path):
    # 32 encoder tokens (model.encoder_seq_length) and 16 decoder tokens per sample, 4 samples per step.
    config = write_config(tmp_path, data_dir, RUN)
    reference = run_training(config, program=ENCODER_DECODER)
    assert sorted(losses(reference.stdout)) == [1, 2, 3, 4]
    assert "validation step=2 val_loss=" in reference.stdout and "test step=4 test_loss=" in reference.stdout
    summary = reference.stdout[reference.stdout.index("training finished at step=4 of 4") :]
    assert "tokens       768 (" in summary and "decoder      16 tokens per sample" in summary
    checkpoints = log_dir(tmp_path) / "checkpoints"
    saved = weights(checkpoints / "step-4", tmp_path)
    assert any(k.startswith("encoder.layers.") for k in saved) and any(k.startswith("decoder.layers.") for k in saved)

    # As kill -9 after the step-2 checkpoint leaves the run: step-4 never completed. The rerun continues from step 2.
    shutil.rmtree(checkpoints / "step-4")
    resumed = run_training(config, program=ENCODER_DECODER)
    assert f"resuming from {checkpoints / 'step-2'}" in resumed.stdout
    assert losses(resumed.stdout) == {s: v for s, v in losses(reference.stdout).items() if s >= 3}
    again = weights(checkpoints / "step-4", tmp_path)
    assert again.keys() == saved.keys()
    for key in saved:
        assert again[key].equal(saved[key]), key


def test_every_loss_a_recipe_reports_is_logged_and_reduced_across_tensor_parallel_ranks(data_dir, tmp_path):
    single = run_training(write_config(tmp_path, data_dir, RUN), program=TWO_LOSSES)
    curve = step_losses(single.stdout)
    assert sorted(curve) == [1, 2, 3, 4]
    for step, reported in curve.items():
        assert set(reported) == {"loss", "lm_loss", "sop_loss"}, reported
        assert reported["loss"] == pytest.approx(reported["lm_loss"] + reported["sop_loss"], abs=2e-4), step
    assert (
        "validation step=4 val_loss=" in single.stdout and " sop_loss=" in single.stdout.split("validation step=4")[1]
    )
    assert "  train sop loss  " in single.stdout and "  train lm loss   " in single.stdout

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir(tmp_path)))
    events.Reload()
    assert {
        "reduced_train_loss",
        "reduced_train_lm_loss",
        "reduced_train_sop_loss",
        "val_loss",
        "val_lm_loss",
        "val_sop_loss",
        "test_loss",
        "test_sop_loss",
    } <= set(events.Tags()["scalars"])
    assert [e.value for e in events.Scalars("reduced_train_sop_loss")] == pytest.approx(
        [curve[s]["sop_loss"] for s in range(1, 5)], abs=1e-4
    )

    # TP=2: the binary head on every rank, the losses gathered once per log point, the same numbers as TP=1.
    split = run_training(
        write_config(
            tmp_path / "tp2",
            data_dir,
            [
                *RUN,
                "trainer.devices=2",
                "model.tensor_model_parallel_size=2",
                f"model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR // 2}",
            ],
        ),
        processes=2,
        program=TWO_LOSSES,
    )
    assert "TP=2 PP=1" in split.stdout
    tp2 = step_losses(split.stdout)
    assert sorted(tp2) == [1, 2, 3, 4]
    for step in curve:
        assert tp2[step] == pytest.approx(curve[step], abs=2e-4), step
