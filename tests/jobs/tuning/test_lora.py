"""LoRA on the tiny GPT through the peft program on the trainer core: only the adapters train and are checkpointed,
the base stays bit-identical, the merge is exact, a kill -9 resumes onto the same adapters, TP=2 learns TP=1's."""

import time

import pytest

from tests.conftest import require_module
from tests.jobs.gpt_train_support import losses, weights
from tests.jobs.sft_support import (  # noqa: F401  (fixtures)
    TINY_BPE_VOCAB,
    lora_section,
    qa_jsonl,
    run_tuning,
    start_tuning,
    tiny_bpe_files,
    tiny_nemo,
)

torch = require_module("torch")

NAME = "checkpoints/megatron_gpt_peft_lora"


def _section(tiny_nemo, qa_jsonl, work):  # noqa: F811
    section = lora_section(tiny_nemo, qa_jsonl, str(work))
    section["trainer"]["log_every_n_steps"] = 1
    return section


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_nemo, qa_jsonl):  # noqa: F811
    work = tmp_path_factory.mktemp("lora")
    return work, run_tuning("peft", _section(tiny_nemo, qa_jsonl, work), work).stdout


def _logits(model, tokens):
    positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
    with torch.no_grad():
        return model(tokens, positions, None).float()


def test_only_adapters_train_and_merging_keeps_the_function(reference, tiny_nemo):  # noqa: F811
    from nemo_launcher.contract.schemas.gpt_sft import LoraSection
    from nemo_launcher.jobs.common.config import bind
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo
    from nemo_launcher.jobs.gpt.inference import load_gpt_nemo as load_nemo
    from nemo_launcher.jobs.tuning.lora import add_lora
    from nemo_launcher.jobs.tuning.lora_file import load_adapter_file

    work, stdout = reference
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 17))
    first, last = sum(curve[s] for s in (1, 2, 3)) / 3, sum(curve[s] for s in (14, 15, 16)) / 3
    assert last < first - 0.3, curve
    assert (
        "LoRA r=4 alpha=8.0 on attention_qkv, attention_dense, mlp_fc1, mlp_fc2: 8 adapters, 6,144 trainable" in stdout
    )

    # The checkpoints hold the adapters alone (their optimizer state aside): the base is never written.
    saved = weights(work / "checkpoints" / "step-16", work)
    assert saved and all(".lora." in key for key in saved), sorted(saved)[:5]

    settings, state = load_adapter_file(work / f"{NAME}.nemo")
    assert settings["adapter_dim"] == 4 and settings["alpha"] == 8.0 and settings["target_modules"] == ["all"]
    assert len(state) == 2 * 2 * 4 and all(".lora." in key for key in state)  # 2 layers x 4 linears x (A, B)
    assert state["decoder.layers.0.mlp.linear_fc1.lora.a"].shape == (4, 64)
    assert state["decoder.layers.0.mlp.linear_fc1.lora.b"].shape == (128, 4)
    assert all(state[f"{name}.lora.b"].abs().sum() > 0 for name in {k.rsplit(".lora.", 1)[0] for k in state})
    for key in saved:
        assert saved[key].equal(state[key.split("tuned.", 1)[-1]]), key

    # The merged model differs from the base exactly by alpha / r x B A on the adapted weights; the rest is the base.
    _, base = load_nemo(tiny_nemo)
    _, merged = load_nemo(work / f"{NAME}_merged.nemo")
    assert merged.keys() == base.keys()
    adapted = {k.rsplit(".lora.", 1)[0] + ".weight" for k in state}
    for key in base:
        if key in adapted:
            name = key[: -len(".weight")]
            delta = 2.0 * state[f"{name}.lora.b"] @ state[f"{name}.lora.a"]
            assert torch.allclose(merged[key], base[key] + delta, atol=1e-6), key
        else:
            assert merged[key].equal(base[key]), f"{key} changed although only adapters train"

    # The base with the adapter file's adapters computes what the merged model computes.
    model, tokenizer = load_gpt_from_nemo(tiny_nemo)
    tokens = torch.tensor([tokenizer.encode("In picture 3 the sky is red. What color is the sky?\nAnswer:")])
    before = _logits(model, tokens)
    adapters = add_lora(
        model, bind(LoraSection, {k: v for k, v in settings.items() if k != "peft_scheme"}, "lora"), seed=0
    )
    assert torch.equal(_logits(model, tokens), before), "B starts at zero: the adapted model starts as the base"
    adapters.load_state_dict(state, "adapter file")
    with_adapters = _logits(model, tokens)
    assert not torch.allclose(with_adapters, before)
    merged_model, _ = load_gpt_from_nemo(work / f"{NAME}_merged.nemo")
    assert torch.allclose(_logits(merged_model, tokens), with_adapters, atol=1e-4)


def test_rerun_after_kill_9_ends_with_the_same_adapters(reference, tiny_nemo, qa_jsonl, tmp_path):  # noqa: F811
    work, stdout = reference
    section = _section(tiny_nemo, qa_jsonl, tmp_path)
    marker = tmp_path / "checkpoints" / "step-8" / "COMPLETE"
    process = start_tuning("peft", section, tmp_path, tmp_path / "killed.log")
    try:
        deadline = time.monotonic() + 400
        while not marker.exists():
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint at step 8 in time"
            time.sleep(0.02)
        process.kill()  # SIGKILL: nothing runs after this, not even our handlers
    finally:
        process.wait()
    assert not (tmp_path / "checkpoints" / "step-16" / "COMPLETE").exists(), "killed too late to test a resume"
    assert not (tmp_path / f"{NAME}.nemo").exists()

    resumed = run_tuning("peft", section, tmp_path).stdout
    assert f"resuming from {tmp_path / 'checkpoints' / 'step-8'}" in resumed
    assert losses(resumed) == {s: v for s, v in losses(stdout).items() if s >= 9}
    from nemo_launcher.jobs.tuning.lora_file import load_adapter_file

    _, ours = load_adapter_file(tmp_path / f"{NAME}.nemo")
    _, theirs = load_adapter_file(work / f"{NAME}.nemo")
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_adapter_file_refuses_a_full_model(tiny_nemo):  # noqa: F811
    from nemo_launcher.jobs.common.config import JobConfigError
    from nemo_launcher.jobs.tuning.lora_file import load_adapter_file

    with pytest.raises(JobConfigError, match="not a LoRA adapter file"):
        load_adapter_file(tiny_nemo)


def test_tensor_parallel_lora_learns_the_same_adapters(tmp_path, tiny_bpe_files, qa_jsonl):  # noqa: F811
    """The peft program under torchrun with TP=2, from a TP=1 archive (resharded on load), and with TP=1 give the
    same losses, adapter file and merged model: the column/row splits of A and B, SwiGLU's [gate; up] rows, the
    sharded checkpoints and the sharded save all line up. The model is the `improved` style (SwiGLU, RoPE, GQA)."""
    from nemo_launcher.jobs.core.nemo_archive import save_nemo
    from nemo_launcher.jobs.gpt.inference import load_gpt_nemo as load_nemo
    from nemo_launcher.jobs.tuning.lora_file import load_adapter_file
    from tests.jobs.gpt_models import model_section, random_model

    base = model_section(
        "improved",
        *tiny_bpe_files,
        encoder_seq_length=64,
        max_position_embeddings=64,
        init_method_std=0.02,
        data={"seq_length": 64, "num_workers": 0},
    )
    save_nemo(tmp_path / "base.nemo", base, random_model(base, TINY_BPE_VOCAB).state_dict())

    def section(tp: int) -> dict:
        config = lora_section(
            str(tmp_path / "base.nemo"), qa_jsonl, str(tmp_path / f"lora_tp{tp}"), target_modules=["all"]
        )
        config["trainer"].update(devices=tp, max_steps=8, val_check_interval=8, log_every_n_steps=1)
        config["model"]["tensor_model_parallel_size"] = tp
        return config

    two = run_tuning("peft", section(2), tmp_path / "lora_tp2", processes=2).stdout
    one = run_tuning("peft", section(1), tmp_path / "lora_tp1").stdout
    assert "TP=2 PP=1" in two
    assert losses(two) == pytest.approx(losses(one), abs=2e-4)

    _, one = load_adapter_file(tmp_path / "lora_tp1" / f"{NAME}.nemo")
    _, two = load_adapter_file(tmp_path / "lora_tp2" / f"{NAME}.nemo")
    assert one.keys() == two.keys() and one["decoder.layers.1.mlp.linear_fc1.lora.b"].shape == (256, 4)
    for key in one:
        assert torch.allclose(one[key], two[key], atol=1e-4), key
    merged_config, merged_two = load_nemo(tmp_path / "lora_tp2" / f"{NAME}_merged.nemo")
    assert merged_config["tensor_model_parallel_size"] == 2  # saved in the layout it was trained in
    _, merged_one = load_nemo(tmp_path / "lora_tp1" / f"{NAME}_merged.nemo")
    for key in merged_one:
        assert torch.allclose(merged_one[key], merged_two[key], atol=1e-4), key
