"""LoRA on the tiny GPT: only the adapters change until they are merged, the loss falls, the merge is exact."""
import json

import pytest

from .sft_support import gpt2_files, lora_section, qa_jsonl, tiny_nemo  # noqa: F401  (fixtures)

from tests.conftest import require_module

torch = require_module("torch")


def _logits(model, tokens):
    positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
    with torch.no_grad():
        return model(tokens, positions, None).float()


def test_only_adapters_train_and_merging_keeps_the_function(tmp_path, tiny_nemo, qa_jsonl):  # noqa: F811
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.gpt import sft_train
    from nemo_launcher.jobs.gpt.lora import add_lora
    from nemo_launcher.contract.schemas.gpt_sft import SftConfig

    cfg = SftConfig.from_dict(lora_section(tiny_nemo, qa_jsonl, str(tmp_path), target_modules=["attention_qkv", "mlp_fc2"]),
                              stage="peft")
    session = sft_train.start(cfg, placement_from_env({}))
    base = {k: v.clone() for k, v in session.model.state_dict().items() if not k.endswith("_extra_state")}
    tokens = torch.tensor([session.tokenizer.encode("In picture 3 the sky is red. What color is the sky?\nAnswer:")])
    before = _logits(session.model, tokens)
    adapters = add_lora(session.model, cfg.model.peft.lora_tuning, seed=cfg.model.seed)
    assert torch.equal(_logits(session.model, tokens), before), "B starts at zero: the adapted model starts as the base"
    assert len(adapters.modules) == 4  # 2 layers x (linear_qkv, linear_fc2)
    trainable = [name for name, p in session.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora." in name for name in trainable)

    history = sft_train.train(session, trainable=adapters.parameters())
    losses = [entry["train_loss"] for entry in history if "train_loss" in entry]
    assert losses[-1] < losses[0] - 0.3, losses

    state = session.model.state_dict()
    for key, value in base.items():
        assert torch.equal(state[key], value), f"{key} changed although only adapters train"
    assert all(state[f"{name}.lora.b"].abs().sum() > 0 for name in adapters.modules), "every B has learned"
    adapted = _logits(session.model, tokens)
    assert not torch.allclose(adapted, before)

    adapters.merge()
    merged = session.model.state_dict()
    assert not any(".lora." in key for key in merged)
    changed = sorted(key for key in base if not torch.equal(merged[key], base[key]))
    assert changed == [f"decoder.layers.{i}.{path}.weight" for i in (0, 1)
                       for path in ("mlp.linear_fc2", "self_attention.linear_qkv")]
    assert torch.allclose(_logits(session.model, tokens), adapted, atol=1e-4)


def test_peft_program_writes_adapter_and_merged_model(tmp_path, tiny_nemo, qa_jsonl):  # noqa: F811
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.gpt import peft
    from nemo_launcher.jobs.gpt.lora_file import load_adapter_file
    from nemo_launcher.jobs.gpt.lora_merge import merge_files
    from nemo_launcher.jobs.gpt.nemo_archive import load_gpt_from_nemo, load_nemo
    from nemo_launcher.contract.schemas.gpt_sft import SftConfig

    cfg = SftConfig.from_dict(lora_section(tiny_nemo, qa_jsonl, str(tmp_path)), stage="peft")
    outputs = peft.lora_tune(cfg, placement_from_env({}))
    assert outputs == {"adapter": f"{tmp_path}/checkpoints/megatron_gpt_peft_lora.nemo",
                       "merged": f"{tmp_path}/checkpoints/megatron_gpt_peft_lora_merged.nemo"}
    losses = [json.loads(line)["train_loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
              if "train_loss" in line]
    assert losses[-1] < losses[0] - 0.3, losses

    settings, state = load_adapter_file(outputs["adapter"])
    assert settings["adapter_dim"] == 4 and settings["alpha"] == 8.0 and settings["target_modules"] == ["all"]
    assert len(state) == 2 * 2 * 4 and all(".lora." in key for key in state)  # 2 layers x 4 linears x (A, B)
    assert state["decoder.layers.0.mlp.linear_fc1.lora.a"].shape == (4, 64)
    assert state["decoder.layers.0.mlp.linear_fc1.lora.b"].shape == (128, 4)

    # Merging the file into the base offline gives the weights the job merged in place.
    offline = merge_files(tiny_nemo, outputs["adapter"], str(tmp_path / "offline.nemo"))
    _, in_place = load_nemo(outputs["merged"])
    _, by_file = load_nemo(offline)
    assert in_place.keys() == by_file.keys()
    for key in in_place:
        assert torch.allclose(in_place[key], by_file[key], atol=1e-6), key
    model, _ = load_gpt_from_nemo(outputs["merged"])  # a plain GPT .nemo: loads without adapter code
    assert sum(p.numel() for p in model.parameters()) == sum(v.numel() for v in by_file.values())


def test_adapter_file_refuses_a_full_model(tiny_nemo):  # noqa: F811
    from nemo_launcher.jobs.common.config import JobConfigError
    from nemo_launcher.jobs.gpt.lora_file import load_adapter_file

    with pytest.raises(JobConfigError, match="not a LoRA adapter file"):
        load_adapter_file(tiny_nemo)


def test_tensor_parallel_lora_learns_the_same_adapters(tmp_path, gpt2_files, qa_jsonl):  # noqa: F811
    """The peft program under torchrun with TP=2, from a TP=1 archive (resharded on load), and in-process
    with TP=1 give the same adapter file and merged model: the column/row splits of A and B, SwiGLU's
    [gate; up] rows and the sharded save all line up. The model is the `improved` style (SwiGLU, RoPE, GQA)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.gpt import peft
    from nemo_launcher.jobs.gpt.lora_file import load_adapter_file
    from nemo_launcher.jobs.gpt.nemo_archive import load_nemo, save_nemo
    from nemo_launcher.contract.schemas.gpt_sft import SftConfig

    from .gpt_models import model_section, random_model

    base = model_section("improved", *gpt2_files, encoder_seq_length=64, max_position_embeddings=64,
                         init_method_std=0.02, data={"seq_length": 64, "num_workers": 0})
    save_nemo(tmp_path / "base.nemo", base, random_model(base).state_dict())

    def section(tp: int) -> dict:
        config = lora_section(str(tmp_path / "base.nemo"), qa_jsonl, str(tmp_path / f"lora_tp{tp}"), target_modules=["all"])
        config["trainer"].update(devices=tp, max_steps=8, val_check_interval=8)
        config["model"]["tensor_model_parallel_size"] = tp
        return config

    (tmp_path / "tp2.yaml").write_text(yaml.safe_dump(section(2)))
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "nemo_launcher.jobs.gpt.peft", "--config", str(tmp_path / "tp2.yaml")],
                            capture_output=True, text=True, timeout=600, cwd=repo, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    peft.lora_tune(SftConfig.from_dict(section(1), stage="peft"), placement_from_env({}))

    name = "checkpoints/megatron_gpt_peft_lora"
    _, one = load_adapter_file(tmp_path / "lora_tp1" / f"{name}.nemo")
    _, two = load_adapter_file(tmp_path / "lora_tp2" / f"{name}.nemo")
    assert one.keys() == two.keys() and one["decoder.layers.1.mlp.linear_fc1.lora.b"].shape == (256, 4)
    for key in one:
        assert torch.allclose(one[key], two[key], atol=1e-4), key
    merged_config, merged_two = load_nemo(tmp_path / "lora_tp2" / f"{name}_merged.nemo")
    assert merged_config["tensor_model_parallel_size"] == 2  # saved in the layout it was trained in
    _, merged_one = load_nemo(tmp_path / "lora_tp1" / f"{name}_merged.nemo")
    for key in merged_one:
        assert torch.allclose(merged_one[key], merged_two[key], atol=1e-4), key
