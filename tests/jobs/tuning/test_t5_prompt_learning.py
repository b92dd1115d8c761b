"""Prompt learning (p-tuning, prompt tuning), Houlsby adapters and IA3 on a frozen tiny T5 through the T5 programs on
the trainer core: the base .nemo is never written and only the method's tensors are checkpointed and saved; the
loss falls on a task the frozen base cannot do; TP=2 learns what TP=1 learns; an adapter run killed with -9 and run
again ends where an uninterrupted run ends; a second prompt-learning task leaves the first task's virtual tokens
bit-identical. The same programs serve mT5 (test_t5_tuned_evaluation.py p-tunes and evaluates one with a
SentencePiece vocabulary)."""

import hashlib

import pytest

from tests.conftest import require_module
from tests.jobs.gpt_train_support import losses, weights
from tests.jobs.sft_support import assert_same_tensors, rerun_after_kill_9, run_tuning
from tests.jobs.t5_tuning_support import THINGS

from .t5_peft_support import prompt_lines as lines
from .t5_peft_support import sharp_t5  # noqa: F401  (fixture)

torch = require_module("torch")

# The four methods: (stage, virtual_prompt_style or None, the result file's method).
METHODS = {
    "prompt-tuning": ("prompt_learning", "prompt-tuning", "prompt"),
    "p-tuning": ("prompt_learning", "p-tuning", "prompt"),
    "adapters": ("adapter_learning", None, "adapter"),
    "ia3": ("ia3_learning", None, "ia3"),
}
MARKERS = {"prompt": "prompt.", "adapter": ".houlsby.", "ia3": ".ia3"}


def section(stage, nemo, data, work, task="colors", style=None, tp=1, steps=16, **model):
    """A resolved prompt_learning / adapter_learning / ia3_learning section for the tiny T5 on the CPU."""
    virtual = stage == "prompt_learning"
    template = ("<|VIRTUAL_PROMPT_0|> " if virtual else "") + "context: {context} question: {question} {answer}"
    result = {
        "run": {"name": "tiny", "results_dir": str(work), "time_limit": "0:30:00", "task_name": task},
        "trainer": {
            "num_nodes": 1,
            "devices": tp,
            "accelerator": "cpu",
            "precision": 32,
            "max_steps": steps,
            "log_every_n_steps": 1,
            "val_check_interval": steps,
            "limit_val_batches": 1,
            "gradient_clip_val": 1.0,
        },
        "exp_manager": {
            "explicit_log_dir": str(work),
            "name": "result",
            "checkpoint_callback_params": {"every_n_train_steps": steps // 2, "save_top_k": 1},
        },
        "model": {
            "language_model_path": nemo,
            "nemo_path": f"{work}/result.nemo",
            "global_batch_size": 8,
            "micro_batch_size": 4,
            "encoder_seq_length": 32,
            "new_tasks": [task],
            "tensor_model_parallel_size": tp,
            "virtual_prompt_style": (style or "p-tuning") if virtual else "no-prompts",
            "task_templates": [
                {
                    "taskname": name,
                    "prompt_template": template,
                    "total_virtual_tokens": 4 if virtual else 0,
                    "virtual_token_splits": [4] if virtual else [],
                    "truncate_field": "context",
                }
                for name in ("colors", "things")
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
        result["model"]["adapter_tuning"] = {"adapter_dim": 8, "adapter_dropout": 0.0}
    return result


def method_section(name, nemo, data, work, tp=1):
    stage, style, _ = METHODS[name]
    return section(stage, nemo, data, work, style=style, tp=tp)


def run_t5(stage, config, work, **kwargs):
    return run_tuning(stage, config, work, family="t5", **kwargs)


def result_of(work, name):
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    return load_method_file(work / "result.nemo", METHODS[name][2])


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, sharp_t5):  # noqa: F811
    """name -> (work folder, stdout) of each method's 16-step TP=1 run, made on first use."""
    root = tmp_path_factory.mktemp("t5_methods")
    data = lines(root / "colors.jsonl", "colors")
    runs = {}

    def run(name):
        if name not in runs:
            work = root / name
            before = digest(sharp_t5)
            runs[name] = work, run_t5(METHODS[name][0], method_section(name, sharp_t5, data, work), work).stdout
            assert digest(sharp_t5) == before, "the base .nemo was written"
        return runs[name]

    run.data = data
    return run


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_trains_and_saves_only_its_own_tensors(name, uninterrupted, tmp_path):
    work, stdout = uninterrupted(name)
    method = METHODS[name][2]
    saved = weights(work / "checkpoints" / "step-16", tmp_path)
    assert saved and all(MARKERS[method] in key for key in saved), sorted(saved)[:5]
    settings, state = result_of(work, name)
    assert settings["method"] == method
    if method == "prompt":
        assert state["prompt_table.colors"].shape == (4, 64)
    elif method == "adapter":
        ups = [v for k, v in state.items() if k.endswith("houlsby.up.weight")]
        assert len(ups) == 2 * 2 + 2 * 2 and all(v.abs().sum() > 0 for v in ups), (
            "every adapter learned (up starts at 0)"
        )
        assert {k.split(".")[0] for k in state} == {"encoder", "decoder"}
    else:
        # per layer: the self-attention's key and value and the FFN's; a decoder layer's cross-attention key and
        # value too
        assert len(state) == 2 * 3 + 2 * 5, sorted(state)
        assert state["decoder.layers.1.cross_attention.linear_kv.ia3.value"].shape == (64,)
        assert state["encoder.layers.0.mlp.linear_fc2.ia3_ffn"].shape == (128,)
        assert all(not torch.equal(v, torch.ones_like(v)) for v in state.values()), "every vector moved from 1"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_loss_falls_on_a_task_the_frozen_base_cannot_do(name, uninterrupted):
    """The random base answers no better than chance over its 1024 rows (loss ~ln 1024 = 6.9 or worse); each method
    alone, with the base frozen, brings the answers' loss well down within 16 steps."""
    _, stdout = uninterrupted(name)
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 17))
    first, last = sum(curve[s] for s in (1, 2, 3)) / 3, sum(curve[s] for s in (14, 15, 16)) / 3
    assert first > 5.0 and last < first - 1.0, curve


# One method: resuming is the trainer core's, the same for every method (the checkpoint holds whatever is trainable
# and its optimizer state); each method's own tensors are checked by the tests above and below. adapters
# keeps the most state of the four.
@pytest.mark.parametrize("name", ["adapters"])
def test_rerun_after_kill_9_ends_where_an_uninterrupted_run_ends(name, uninterrupted, sharp_t5, tmp_path):  # noqa: F811
    reference, stdout = uninterrupted(name)
    config = method_section(name, sharp_t5, uninterrupted.data, tmp_path)
    resumed = rerun_after_kill_9(METHODS[name][0], config, tmp_path, kill_after=8, family="t5")
    assert losses(resumed) == {s: v for s, v in losses(stdout).items() if s >= 9}
    assert_same_tensors(result_of(tmp_path, name)[1], result_of(reference, name)[1])


@pytest.mark.parametrize("name", sorted(METHODS))
def test_two_tensor_parallel_ranks_learn_what_one_learns(name, uninterrupted, sharp_t5, tmp_path):  # noqa: F811
    """TP=2 from the TP=1 archive (resharded on load): the same losses and the same whole tensors in the result
    (IA3's vectors are cut along heads and FFN columns, the prompt encoder and adapters are whole on each rank)."""
    reference, stdout = uninterrupted(name)
    config = method_section(name, sharp_t5, uninterrupted.data, tmp_path, tp=2)
    two = run_t5(METHODS[name][0], config, tmp_path, processes=2).stdout
    assert "TP=2 PP=1" in two
    assert losses(two) == pytest.approx(losses(stdout), abs=2e-3)
    assert_same_tensors(result_of(tmp_path, name)[1], result_of(reference, name)[1], atol=2e-3)


def test_adding_a_task_leaves_the_first_tasks_virtual_tokens_bit_identical(uninterrupted, sharp_t5, tmp_path):  # noqa: F811
    first_dir, _ = uninterrupted("p-tuning")
    _, first = result_of(first_dir, "p-tuning")
    things = lines(tmp_path / "things.jsonl", "things", values=THINGS)
    second = section(
        "prompt_learning",
        sharp_t5,
        things,
        tmp_path,
        task="things",
        steps=4,
        restore_path=str(first_dir / "result.nemo"),
        existing_tasks=["colors"],
    )
    run_t5("prompt_learning", second, tmp_path)
    settings, both = result_of(tmp_path, "p-tuning")
    assert sorted(settings["tasks"]) == ["colors", "things"]
    assert both["prompt_table.colors"].equal(first["prompt_table.colors"])
    assert not both["prompt_table.things"].equal(both["prompt_table.colors"])
