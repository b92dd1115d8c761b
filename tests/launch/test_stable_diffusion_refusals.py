"""Stable Diffusion mistakes refused at launch (exit 2, one `Error:` line naming the key and the fix, nothing written):
what the seed forbids (model parallelism), what diffusers' classes cannot build, and data that cannot fit the UNet;
for InstructPix2Pix and DreamBooth also a starting checkpoint missing or of the wrong kind, weights named twice,
channel counts, and the text encoder's switch set one way and its seed key the other."""

import pytest

SD = ["stages=[training]", "training=stable_diffusion/860m_res_256_pretrain"]
TINY = ["stages=[training]", "training=stable_diffusion/tiny", "cluster_type=interactive"]
IP2P = ["stages=[training]", "training=instruct_pix2pix/860m_sd_edit"]
IP2P_TINY = ["stages=[training]", "training=instruct_pix2pix/tiny", "cluster_type=interactive"]
DB = ["stages=[training]", "training=dreambooth/860m"]
DB_TINY = ["stages=[training]", "training=dreambooth/tiny", "cluster_type=interactive"]

CASES = [
    (
        SD,
        ["training.model.tensor_model_parallel_size=2"],
        ["training.model.tensor_model_parallel_size=2", "data parallelism only"],
    ),
    (
        SD,
        ["training.model.unet_config.attention_resolutions=[16]"],
        ["attention_resolutions", "choose from [1, 2, 4, 8]"],
    ),
    (
        SD,
        ["training.model.unet_config.num_head_channels=64"],
        ["training.model.unet_config.num_heads=8", "exactly one"],
    ),
    (SD, ["training.model.unet_config.in_channels=3"], ["unet_config.in_channels=3", "InstructPix2Pix"]),
    (SD, ["training.model.first_stage_config.ddconfig.attn_resolutions=[32]"], ["attn_resolutions", "middle block"]),
    (SD, ["training.model.first_stage_config.embed_dim=8"], ["ddconfig.z_channels=4", "embed_dim (8)"]),
    (SD, ["training.model.text_embedding_dropout_rate=1.0"], ["text_embedding_dropout_rate=1.0", "[0, 1)"]),
    (
        SD,
        ["training.model.global_batch_size=1000"],
        ["global_batch_size=1000", "micro_batch_size(128) x data-parallel size(64)"],
    ),
    (SD, ["training.trainer.limit_test_batches=1"], ["limit_test_batches=1", "fid_clip"]),
    (
        SD,
        ["training.model.first_stage_key=images", "training.model.image_size=64"],
        ["center_crop_h_w='256, 256'", "images of 512 px", '"512, 512"'],
    ),
    (TINY, ["training.model.cond_stage_config.hidden_size=64"], ["cond_stage_config.hidden_size=64", "context_dim"]),
    (TINY, ["training.model.unet_config.norm_num_groups=5"], ["norm_num_groups=5", "[32, 64]"]),
    (
        IP2P,
        ["training.model.ckpt_path=null"],
        ["training.model.ckpt_path=None", "Stable Diffusion checkpoint to start from"],
    ),
    (
        IP2P,
        ["training.model.unet_config.in_channels=4"],
        ["unet_config.in_channels=4", "noisy latents and the input image's: set 8"],
    ),
    (
        IP2P,
        ["training.model.first_stage_config.from_pretrained=/sd/vae"],
        ["first_stage_config.from_pretrained='/sd/vae'", "come from model.ckpt_path", "set null"],
    ),
    (
        IP2P,
        ["training.model.cond_stage_config.pretrained=/sd/clip"],
        ["cond_stage_config.pretrained='/sd/clip'", "hidden_size"],
    ),
    (IP2P, ["training.model.conditioning_dropout_rate=0.5"], ["conditioning_dropout_rate=0.5", "[0, 1/3]"]),
    (
        IP2P,
        ["training.model.text_embedding_dropout_rate=0.1"],
        ["text_embedding_dropout_rate=0.1", "conditioning_dropout_rate"],
    ),
    (IP2P, ["training.model.data.resolution=512"], ["training.model.data.resolution=512", "images of 256 px"]),
    (IP2P, ["training.model.tensor_model_parallel_size=2"], ["tensor_model_parallel_size=2", "data parallelism only"]),
    (IP2P_TINY, ["training.trainer.limit_val_batches=2"], ["limit_val_batches=2", "no validation split"]),
    (DB, ["training.model.restore_from_path=/sd/model.ckpt"], ["restore_from_path='/sd/model.ckpt'", "from a .nemo"]),
    (DB, ["training.model.cond_stage_trainable=true"], ["cond_stage_trainable=True", "train_text_encoder (False)"]),
    (DB, ["training.model.unet_config.in_channels=8"], ["unet_config.in_channels=8", "text-to-image UNet: set 4"]),
    (
        DB,
        ["training.model.with_prior_preservation=true", "training.model.data.regularization_prompt=null"],
        ["data.regularization_prompt=None", "with_prior_preservation"],
    ),
    (DB, ["training.model.data.instance_prompt=' '"], ["instance_prompt", "special token"]),
    (DB, ["training.model.prior_loss_weight=-1"], ["prior_loss_weight=-1"]),
    (DB_TINY, ["training.model.data.resolution=64"], ["data.resolution=64", "images of 32 px"]),
    (DB_TINY, ["training.model.data.reg_generation.sampler_type=Heun"], ["sampler_type='Heun'"]),
    # A run is sized by max_steps or by max_epochs (the seed's 860m_res_256), never by both or neither
    # (tests/launch/test_epochs.py has the rest); the fine-tunes count steps only.
    (
        SD,
        ["training.trainer.max_epochs=10"],
        ["training.trainer.max_epochs=10", "max_steps=82500 sizes the run too", "set training.trainer.max_steps=null"],
    ),
    (DB, ["training.trainer.max_epochs=10"], ["training.trainer.max_epochs=10", "set null"]),
]


@pytest.mark.parametrize("base, overrides, words", CASES)
def test_stable_diffusion_mistake_is_refused_at_launch(base, overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(base + overrides + ["check_inputs=false"], results=results)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    for word in words:
        assert word in lines[0], f"expected {word!r} in: {lines[0]}"
    assert not list(results.rglob("*_submission.sh"))


def test_a_missing_starting_checkpoint_is_named_before_anything_runs(launch, tmp_path):
    """With check_inputs on, the SD checkpoint the config names must exist (or come from an earlier stage); a dry
    run only warns, a real one refuses."""
    code, out, err = launch(IP2P_TINY + ["check_inputs=true"], debug=False, results=tmp_path / "results")
    assert code == 2 and "training.model.ckpt_path=" in err and "nemo_stable_diffusion.nemo" in err, err
    assert not list((tmp_path / "results").rglob("*_submission.sh"))
