"""Prompt learning (p-tuning, prompt tuning), Houlsby adapters and IA3 on a tiny GPT through their programs on the
trainer core: each trains and checkpoints only its own tensors and writes them to its result file; its loss falls on a
task the frozen base cannot do; TP=2 learns what TP=1 learns; a p-tuning run killed with -9 and run again ends where
an uninterrupted run ends; a second prompt-learning task leaves the first task's virtual tokens bit-identical."""

import json

import pytest

from tests.conftest import require_module
from tests.jobs.gpt_train_support import losses, weights
from tests.jobs.sft_support import (  # noqa: F401  (fixtures)
    COLORS,
    assert_same_tensors,
    rerun_after_kill_9,
    run_tuning,
    sharp_nemo,
    tiny_bpe_files,
    tiny_nemo,
)

torch = require_module("torch")

SHAPES = ["circle", "square", "triangle", "star"]
# The answers the four methods learn: words the tiny BPE keeps whole (" license" is one token), as GPT-2 keeps the
# colour names whole. A colour is 2 to 5 tiny-BPE pieces; with them prompt tuning's loss fell only 0.6 nats in the
# 16 steps below, and 1.0 in 32.
WORDS = ["license", "copy", "source", "program", "patent", "notice", "library", "version"]


def _lines(path, task, values):
    with open(path, "w") as handle:
        for i in range(32):
            value = values[i % len(values)]
            handle.write(
                json.dumps(
                    {
                        "taskname": task,
                        "context": f"In picture {i} the thing is {value}.",
                        "question": "What is it?",
                        "answer": value,
                    }
                )
                + "\n"
            )
    return str(path)


def _section(stage, nemo, data, work, task="colors", **model):
    virtual = stage == "prompt_learning"
    template = ("<|VIRTUAL_PROMPT_0|>" if virtual else "") + "Context: {context} Question: {question} Answer: {answer}"
    section = {
        "run": {"name": "tiny", "results_dir": str(work), "time_limit": "0:30:00", "task_name": task},
        "trainer": {
            "num_nodes": 1,
            "devices": 1,
            "accelerator": "cpu",
            "precision": 32,
            "max_steps": 8,
            "log_every_n_steps": 1,
            "val_check_interval": 8,
            "limit_val_batches": 1,
            "gradient_clip_val": 1.0,
        },
        "exp_manager": {
            "explicit_log_dir": str(work),
            "name": "result",
            "checkpoint_callback_params": {"every_n_train_steps": 4, "save_top_k": 1},
        },
        "model": {
            "language_model_path": nemo,
            "nemo_path": f"{work}/result.nemo",
            "global_batch_size": 8,
            "micro_batch_size": 4,
            "encoder_seq_length": 64,
            "new_tasks": [task],
            "virtual_prompt_style": "p-tuning" if virtual else "no-prompts",
            "task_templates": [
                {
                    "taskname": name,
                    "prompt_template": template,
                    "total_virtual_tokens": 4 if virtual else 0,
                    "virtual_token_splits": [4] if virtual else [],
                    "truncate_field": "context",
                }
                for name in ("colors", "shapes")
            ],
            "p_tuning": {"encoder_type": "mlp", "encoder_hidden": 32},
            "optim": {
                "name": "adamw",
                "lr": 2.0e-2,
                "weight_decay": 0.0,
                "betas": [0.9, 0.98],
                "sched": {"name": "CosineAnnealing", "warmup_steps": 2, "min_lr": 1.0e-4},
            },
            "data": {"train_ds": [data], "validation_ds": [data], "num_workers": 0},
            **model,
        },
    }
    if stage == "adapter_learning":
        section["model"]["adapter_tuning"] = {"adapter_dim": 8, "adapter_dropout": 0.0}
    return section


def test_adding_a_task_leaves_the_first_tasks_virtual_tokens_bit_identical(tmp_path, tiny_nemo):  # noqa: F811
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    colors = _lines(tmp_path / "colors.jsonl", "colors", COLORS)
    shapes = _lines(tmp_path / "shapes.jsonl", "shapes", SHAPES)
    run_tuning(
        "prompt_learning", _section("prompt_learning", tiny_nemo, colors, tmp_path / "first"), tmp_path / "first"
    )
    _, first = load_method_file(tmp_path / "first" / "result.nemo", "prompt")
    second = _section(
        "prompt_learning",
        tiny_nemo,
        shapes,
        tmp_path / "second",
        task="shapes",
        restore_path=str(tmp_path / "first" / "result.nemo"),
        existing_tasks=["colors"],
    )
    run_tuning("prompt_learning", second, tmp_path / "second")
    settings, both = load_method_file(tmp_path / "second" / "result.nemo", "prompt")
    assert sorted(settings["tasks"]) == ["colors", "shapes"]
    assert both["prompt_table.colors"].equal(first["prompt_table.colors"])
    assert not both["prompt_table.shapes"].equal(both["prompt_table.colors"])


# The four methods: (stage, virtual_prompt_style or None, what marks its tensors, its result file's method).
METHODS = {
    "prompt-tuning": ("prompt_learning", "prompt-tuning", "prompt"),
    "p-tuning": ("prompt_learning", "p-tuning", "prompt"),
    "adapters": ("adapter_learning", None, "adapter"),
    "ia3": ("ia3_learning", None, "ia3"),
}


def _method_section(name, nemo, data, work, tp=1):
    stage, style, _ = METHODS[name]
    section = _section(stage, nemo, data, work)
    if stage == "prompt_learning":
        # 2.5x _section's rate for the virtual tokens: over the tiny BPE's 2,048 tokens prompt tuning moves the loss
        # less per step than over GPT-2's 50,257 (16 steps at 2e-2: 1.7 nats with GPT-2, 0.8 here; at 5e-2: 1.4).
        # Adapters and IA3 fall 4.7 and 1.6 nats at 2e-2, and a faster start would blur the chance-level check.
        section["model"]["optim"]["lr"] = 5.0e-2
    section["trainer"].update(max_steps=16, val_check_interval=16, log_every_n_steps=1, devices=tp)
    section["exp_manager"]["checkpoint_callback_params"]["every_n_train_steps"] = 8
    section["model"]["tensor_model_parallel_size"] = tp
    if style:
        section["model"]["virtual_prompt_style"] = style
    return section


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, sharp_nemo):  # noqa: F811
    """name -> (work folder, stdout) of each method's 16-step TP=1 run, made on first use."""
    root = tmp_path_factory.mktemp("methods")
    data = _lines(root / "colors.jsonl", "colors", WORDS)
    runs = {}

    def run(name):
        if name not in runs:
            work = root / name
            runs[name] = work, run_tuning(METHODS[name][0], _method_section(name, sharp_nemo, data, work), work).stdout
        return runs[name]

    run.data = data
    return run


def _result(work, name):
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    return load_method_file(work / "result.nemo", METHODS[name][2])[1]


# What marks each method's tensors in a checkpoint.
MARKERS = {"prompt": "prompt.", "adapter": ".houlsby.", "ia3": ".ia3"}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_trains_and_saves_only_its_own_tensors(name, uninterrupted, sharp_nemo, tmp_path):  # noqa: F811
    """Read off the 16-step runs the other tests share, as the T5 methods' test does."""
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    work, stdout = uninterrupted(name)
    method = METHODS[name][2]
    assert sorted(losses(stdout)) == list(range(1, 17))
    saved = weights(work / "checkpoints" / "step-16", tmp_path)
    assert saved and all(MARKERS[method] in key for key in saved), sorted(saved)[:5]

    settings, state = load_method_file(work / "result.nemo", method)
    assert settings["method"] == method and state
    if method == "prompt":
        assert state["prompt_table.colors"].shape == (4, 64)
    elif method == "adapter":
        ups = [v for k, v in state.items() if k.endswith("houlsby.up.weight")]
        assert len(ups) == 4 and all(v.abs().sum() > 0 for v in ups), "every adapter has learned (up starts at 0)"
    else:
        assert len(state) == 2 * 3 and state["decoder.layers.0.mlp.linear_fc2.ia3_ffn"].shape == (128,)
        assert any(not torch.equal(v, torch.ones_like(v)) for v in state.values()), "the vectors moved from 1"
    with pytest.raises(Exception, match="not a"):
        load_method_file(sharp_nemo, method)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_loss_falls_on_a_task_the_frozen_base_cannot_do(name, uninterrupted, tiny_bpe_files):  # noqa: F811
    """The random base answers these questions no better than chance over its 2,048 tokens (ln 2048 = 7.6); each
    method alone, with the base frozen, brings the answers' loss well down within 16 steps."""
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    vocab, merges = tiny_bpe_files
    tokenizer = load_tokenizer("megatron", "GPT2BPETokenizer", vocab_file=vocab, merge_file=merges)
    assert all(len(tokenizer.encode(" " + word)) == 1 for word in WORDS), "each answer is one token and the end"
    _, stdout = uninterrupted(name)
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 17))
    first, last = sum(curve[s] for s in (1, 2, 3)) / 3, sum(curve[s] for s in (14, 15, 16)) / 3
    # Chance is ln 2048 = 7.6 (it was ln 50257 = 10.8 with GPT-2's files, and the bound 10.0); the drop stays 1 nat.
    assert first > 7.0 and last < first - 1.0, curve


# One method: resuming is the trainer core's, the same for every method (the checkpoint holds whatever is trainable
# and its optimizer state); each method's own tensors are checked by the tests above and below. p-tuning
# keeps the most state of the four.
@pytest.mark.parametrize("name", ["p-tuning"])
def test_rerun_after_kill_9_ends_where_an_uninterrupted_run_ends(name, uninterrupted, sharp_nemo, tmp_path):  # noqa: F811
    reference, stdout = uninterrupted(name)
    stage = METHODS[name][0]
    section = _method_section(name, sharp_nemo, uninterrupted.data, tmp_path)
    resumed = rerun_after_kill_9(stage, section, tmp_path, kill_after=8)
    assert losses(resumed) == {s: v for s, v in losses(stdout).items() if s >= 9}
    assert_same_tensors(_result(tmp_path, name), _result(reference, name))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_two_tensor_parallel_ranks_learn_what_one_learns(name, uninterrupted, sharp_nemo, tmp_path):  # noqa: F811
    """TP=2 from the TP=1 archive (resharded on load): the same losses and the same whole tensors in the result
    (IA3's vectors are cut along heads and FFN columns, the prompt encoder and adapters are whole on each rank)."""
    reference, stdout = uninterrupted(name)
    section = _method_section(name, sharp_nemo, uninterrupted.data, tmp_path, tp=2)
    two = run_tuning(METHODS[name][0], section, tmp_path, processes=2).stdout
    assert "TP=2 PP=1" in two
    assert losses(two) == pytest.approx(losses(stdout), abs=2e-3)
    assert_same_tensors(_result(tmp_path, name), _result(reference, name), atol=2e-3)
