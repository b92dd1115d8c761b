"""Stable Diffusion mistakes refused at launch (exit 2, one `Error:` line naming the key and the fix, nothing written):
what the seed forbids (model parallelism), what diffusers' classes cannot build, and data that cannot fit the UNet."""
import pytest

SD = ["stages=[training]", "training=stable_diffusion/860m_res_256_pretrain"]
TINY = ["stages=[training]", "training=stable_diffusion/tiny", "cluster_type=interactive"]

CASES = [
    (SD, ["training.model.tensor_model_parallel_size=2"], ["training.model.tensor_model_parallel_size=2", "data parallelism only"]),
    (SD, ["training.model.unet_config.attention_resolutions=[16]"], ["attention_resolutions", "choose from [1, 2, 4, 8]"]),
    (SD, ["training.model.unet_config.num_head_channels=64"], ["training.model.unet_config.num_heads=8", "exactly one"]),
    (SD, ["training.model.unet_config.in_channels=3"], ["unet_config.in_channels=3", "InstructPix2Pix"]),
    (SD, ["training.model.first_stage_config.ddconfig.attn_resolutions=[32]"], ["attn_resolutions", "middle block"]),
    (SD, ["training.model.first_stage_config.embed_dim=8"], ["ddconfig.z_channels=4", "embed_dim (8)"]),
    (SD, ["training.model.text_embedding_dropout_rate=1.0"], ["text_embedding_dropout_rate=1.0", "[0, 1)"]),
    (SD, ["training.model.global_batch_size=1000"], ["global_batch_size=1000", "micro_batch_size(128) x data-parallel size(64)"]),
    (SD, ["training.trainer.limit_test_batches=1"], ["limit_test_batches=1", "fid_clip"]),
    (SD, ["training.model.first_stage_key=images", "training.model.image_size=64"],
     ["center_crop_h_w='256, 256'", "images of 512 px", "\"512, 512\""]),
    (TINY, ["training.model.cond_stage_config.hidden_size=64"], ["cond_stage_config.hidden_size=64", "context_dim"]),
    (TINY, ["training.model.unet_config.norm_num_groups=5"], ["norm_num_groups=5", "[32, 64]"]),
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
