"""The ViT and CLIP families at launch: their configs carry the seed's tables, both spellings of ViT B/16 select one
config, and the seed's CLIP rules (no gradient accumulation, no EMA with AMP O2) are refused in one line."""

import pytest

from nemo_launcher.launch.stage_config import stage_config


def _training(choice, tmp_path, overrides=()):
    return stage_config("training", choice, tmp_path / "data", tmp_path / "results", overrides)


# config: (layers, hidden, FFN, heads, patch, micro batch, global batch, nodes)
SEED_VIT = {
    "B_16": (12, 768, 3072, 12, 16, 512, 4096, 1),
    "L_16": (24, 1024, 4096, 16, 16, 256, 4096, 2),
    "H_14": (32, 1280, 5120, 16, 14, 128, 4096, 4),
    "g_14": (40, 1408, 6144, 16, 14, 64, 4096, 4),
    "bigG_14": (48, 1664, 8192, 16, 14, 32, 4096, 4),
}


@pytest.mark.parametrize("size", sorted(SEED_VIT))
def test_vit_configs_carry_the_seeds_table(size, tmp_path):
    c = _training(f"vit/{size}", tmp_path)
    m = c["model"]
    assert (
        m["num_layers"],
        m["hidden_size"],
        m["ffn_hidden_size"],
        m["num_attention_heads"],
        m["patch_dim"],
        m["micro_batch_size"],
        m["global_batch_size"],
        c["trainer"]["num_nodes"],
    ) == SEED_VIT[size]
    assert (m["img_h"], m["img_w"], c["trainer"]["precision"], m["megatron_amp_O2"]) == (224, 224, "bf16", True)
    # 400M training samples at 4096 per step; the accuracy recipe's optimizer.
    assert c["trainer"]["max_steps"] * m["global_batch_size"] >= 400_000_000
    assert (m["optim"]["lr"], m["optim"]["weight_decay"], m["optim"]["betas"]) == (3.0e-3, 0.3, [0.9, 0.999])


def test_both_spellings_of_vit_b_16_select_the_same_config(tmp_path):
    assert _training("vit/vit_B_16", tmp_path) == _training("vit/B_16", tmp_path)


# config: (vision layers, hidden, heads, patch; text layers, hidden, heads; output dim, micro batch, global batch,
# nodes)
SEED_CLIP = {
    "vit_B_32": (12, 768, 12, 32, 12, 512, 8, 512, 500, 32000, 8),
    "vit_L_14": (24, 1024, 16, 14, 12, 768, 12, 768, 112, 32256, 36),
    "vit_H_14": (32, 1280, 16, 14, 24, 1024, 16, 1024, 80, 32000, 50),
    "vit_g_14": (40, 1408, 16, 14, 24, 1024, 16, 1024, 88, 32384, 46),
}


@pytest.mark.parametrize("size", sorted(SEED_CLIP))
def test_clip_configs_carry_the_seeds_table_and_need_no_accumulation(size, tmp_path):
    c = _training(f"clip/{size}", tmp_path)
    m, v, t = c["model"], c["model"]["vision"], c["model"]["text"]
    assert (
        v["num_layers"],
        v["hidden_size"],
        v["num_attention_heads"],
        v["patch_dim"],
        t["num_layers"],
        t["hidden_size"],
        t["num_attention_heads"],
        m["output_dim"],
        m["micro_batch_size"],
        m["global_batch_size"],
        c["trainer"]["num_nodes"],
    ) == SEED_CLIP[size]
    assert m["micro_batch_size"] * c["trainer"]["num_nodes"] * c["trainer"]["devices"] == m["global_batch_size"]
    assert c["trainer"]["max_steps"] * m["global_batch_size"] >= 12_000_000_000
    assert (v["img_h"], c["trainer"]["precision"], m["megatron_amp_O2"], c["exp_manager"]["ema"]["enable"]) == (
        224,
        "bf16",
        True,
        False,
    )


REFUSALS = [
    (
        "clip/vit_B_32",
        ["training.trainer.num_nodes=4"],
        "training.model.global_batch_size=32000: CLIP has no gradient accumulation: micro_batch_size(500) x GPUs "
        "(nodes(4) x devices(8) = 32) = 16000 must equal it",
    ),
    (
        "clip/vit_B_32",
        ["training.model.tensor_model_parallel_size=2"],
        "micro_batch_size(500) x GPUs (nodes(8) x devices(8) / TP(2) = 32) = 16000",
    ),
    (
        "clip/vit_B_32",
        ["training.exp_manager.ema.enable=true"],
        "training.exp_manager.ema.enable=True: EMA does not work with AMP O2",
    ),
    (
        "clip/vit_B_32",
        ["training.model.megatron_amp_O2=false"],
        "training.model.megatron_amp_O2=False: trainer.precision=bf16",
    ),
    ("clip/vit_B_32", ["training.model.text.output_dim=256"], "training.model.text.output_dim=256: must equal"),
    ("clip/vit_B_32", ["training.model.tokenizer.library=byte"], "training.model.tokenizer.vocab_file="),
    ("clip/vit_B_32", ["training.trainer.limit_val_batches=5"], "training.model.data.validation=None"),
    (
        "vit/B_16",
        ["training.model.pipeline_model_parallel_size=2"],
        "training.model.pipeline_model_parallel_size=2: ViT and CLIP have no pipeline parallelism",
    ),
    ("vit/B_16", ["training.model.img_h=230"], "training.model.img_h=230: must be a multiple of patch_dim (16)"),
    ("vit/B_16", ["training.model.num_channels=1"], "training.model.num_channels=1: images are read as RGB"),
    ("vit/B_16", ["training.trainer.limit_test_batches=2"], "training.trainer.limit_test_batches=2: ImageNet's layout"),
    ("vit/B_16", ["training.model.data.data_path=[/a]"], "training.model.data.data_path=['/a']: validation"),
    ("vit/B_16", ["training.model.data.random_crop_scale=[0.5,0.2]"], "training.model.data.random_crop_scale"),
    ("vit/H_14", ["training.model.tensor_model_parallel_size=3"], "training.model.tensor_model_parallel_size=3"),
]


@pytest.mark.parametrize("choice, overrides, words", REFUSALS)
def test_mistakes_are_refused_in_one_line(choice, overrides, words, launch, tmp_path):
    code, out, err = launch(["stages=[training]", f"training={choice}", *overrides], results=tmp_path / "results")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], err
