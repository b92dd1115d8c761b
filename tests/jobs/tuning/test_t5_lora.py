"""LoRA on a frozen tiny T5 through the T5 peft program (GPT's LoRA code, tuning/lora.py, on the encoder's and the
decoder's attention, self and cross): the base .nemo is never written and only the adapters are checkpointed and
saved, the merged model is the base plus alpha / r x B A, the loss falls on a task the frozen base cannot do, TP=2
learns what TP=1 learns, and a kill -9 then rerun ends where an uninterrupted run ends."""

import hashlib
import json

import pytest

from tests.conftest import require_module
from tests.jobs.gpt_train_support import losses, weights
from tests.jobs.sft_support import assert_same_tensors, rerun_after_kill_9, run_tuning
from tests.jobs.t5_tuning_support import COLOURS, THINGS

from .t5_peft_support import sharp_t5  # noqa: F401  (fixture)

torch = require_module("torch")

NAME = "megatron_t5_peft_lora"


def qa_lines(path) -> str:
    """Prompt/answer jsonl: 48 questions whose answer, one of the colours, is named in the question."""
    with open(path, "w") as handle:
        for i in range(48):
            thing, colour = THINGS[i % len(THINGS)], COLOURS[(i * 7) % len(COLOURS)]
            handle.write(
                json.dumps({"input": f"the {thing} is {colour} . what is the {thing} ?", "output": colour}) + "\n"
            )
    return str(path)


def section(nemo, data, work, tp=1) -> dict:
    """A resolved peft section (conf/peft/t5/squad.yaml's keys) for the tiny T5 on the CPU: 16 steps of 8."""
    dataset = {"file_names": [data], "prompt_template": "question: {input} answer: {output}", "max_seq_length": 32}
    return {
        "run": {"name": "tiny", "results_dir": str(work), "time_limit": "0:30:00", "task_name": "colors"},
        "trainer": {
            "num_nodes": 1,
            "devices": tp,
            "accelerator": "cpu",
            "precision": 32,
            "max_steps": 16,
            "log_every_n_steps": 1,
            "val_check_interval": 16,
            "limit_val_batches": 1,
            "gradient_clip_val": 1.0,
        },
        "exp_manager": {
            "explicit_log_dir": str(work),
            "name": NAME,
            "checkpoint_callback_params": {"every_n_train_steps": 8, "save_top_k": 1},
        },
        "model": {
            "restore_from_path": nemo,
            "tensor_model_parallel_size": tp,
            "global_batch_size": 8,
            "micro_batch_size": 4,
            "seed": 1234,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
            "optim": {
                "name": "adamw",
                "lr": 2.0e-2,
                "weight_decay": 0.0,
                "betas": [0.9, 0.98],
                "sched": {"name": "CosineAnnealing", "warmup_steps": 2, "constant_steps": 0, "min_lr": 1.0e-4},
            },
            "peft": {
                "peft_scheme": "lora",
                "merge": True,
                "lora_tuning": {
                    "adapter_dim": 4,
                    "alpha": 8,
                    "adapter_dropout": 0.0,
                    "target_modules": ["attention_qkv", "attention_dense"],
                },
            },
            "data": {"train_ds": dict(dataset), "validation_ds": dict(dataset, metric={"name": "exact_string_match"})},
        },
    }


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def adapters_of(work):
    from nemo_launcher.jobs.tuning.lora_file import load_adapter_file

    return load_adapter_file(work / "checkpoints" / f"{NAME}.nemo")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, sharp_t5):  # noqa: F811
    """(work folder, data, stdout) of the 16-step TP=1 run."""
    work = tmp_path_factory.mktemp("t5_lora")
    data = qa_lines(work / "colors.jsonl")
    before = digest(sharp_t5)
    stdout = run_tuning("peft", section(sharp_t5, data, work), work, family="t5").stdout
    assert digest(sharp_t5) == before, "the base .nemo was written"
    return work, data, stdout


def test_only_the_adapters_train_and_the_base_stays_bit_identical(reference, sharp_t5):  # noqa: F811
    from nemo_launcher.jobs.t5.standalone import load_t5_nemo

    work, _, stdout = reference
    saved = weights(work / "checkpoints" / "step-16", work)
    assert saved and all(".lora." in key for key in saved), sorted(saved)[:5]

    settings, state = adapters_of(work)
    assert settings["adapter_dim"] == 4 and settings["target_modules"] == ["attention_qkv", "attention_dense"]
    # 2 encoder layers x (qkv, proj) + 2 decoder layers x (qkv, proj, cross q, cross kv, cross proj), each A and B
    assert len(state) == 2 * (2 * 2 + 2 * 5), sorted(state)
    assert state["decoder.layers.1.cross_attention.linear_kv.lora.b"].shape == (128, 4)
    assert state["encoder.layers.0.self_attention.linear_qkv.lora.a"].shape == (4, 64)
    assert all(state[f"{name}.lora.b"].abs().sum() > 0 for name in {k.rsplit(".lora.", 1)[0] for k in state}), (
        "every B moved from zero"
    )
    for key in saved:
        assert saved[key].equal(state[key.split("tuned.", 1)[-1]]), key

    # The merged model is the base, bit for bit, except alpha / r x B A on the adapted weights.
    _, base = load_t5_nemo(sharp_t5)
    _, merged = load_t5_nemo(work / "checkpoints" / f"{NAME}_merged.nemo")
    assert merged.keys() == base.keys()
    adapted = {k.rsplit(".lora.", 1)[0] + ".weight" for k in state}
    assert adapted <= set(base)
    for key in base:
        if key in adapted:
            name = key[: -len(".weight")]
            delta = 2.0 * state[f"{name}.lora.b"] @ state[f"{name}.lora.a"]
            assert torch.allclose(merged[key], base[key] + delta, atol=1e-6), key
        else:
            assert merged[key].equal(base[key]), f"{key} changed although only adapters train"


def test_the_loss_falls_on_a_task_the_frozen_base_cannot_do(reference):
    _, _, stdout = reference
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 17))
    first, last = sum(curve[s] for s in (1, 2, 3)) / 3, sum(curve[s] for s in (14, 15, 16)) / 3
    assert first > 5.0 and last < first - 1.0, curve


def test_two_tensor_parallel_ranks_learn_what_one_learns(reference, sharp_t5, tmp_path):  # noqa: F811
    """TP=2 from the TP=1 archive (resharded on load): the same losses and the same whole adapters, the cross
    attention's column-parallel linear_q and linear_kv and row-parallel linear_proj included."""
    work, data, stdout = reference
    two = run_tuning("peft", section(sharp_t5, data, tmp_path, tp=2), tmp_path, processes=2, family="t5").stdout
    assert "TP=2 PP=1" in two
    assert losses(two) == pytest.approx(losses(stdout), abs=2e-3)
    assert_same_tensors(adapters_of(tmp_path)[1], adapters_of(work)[1], atol=2e-3)


def test_rerun_after_kill_9_ends_where_an_uninterrupted_run_ends(reference, sharp_t5, tmp_path):  # noqa: F811
    work, data, stdout = reference
    resumed = rerun_after_kill_9(
        "peft",
        section(sharp_t5, data, tmp_path),
        tmp_path,
        kill_after=8,
        family="t5",
        result=tmp_path / "checkpoints" / f"{NAME}.nemo",
    )
    assert losses(resumed) == {s: v for s, v in losses(stdout).items() if s >= 9}
    assert_same_tensors(adapters_of(tmp_path)[1], adapters_of(work)[1])
