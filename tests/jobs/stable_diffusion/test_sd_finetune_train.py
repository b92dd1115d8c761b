"""InstructPix2Pix and DreamBooth training on the tiny model, from a tiny Stable Diffusion .nemo whose VAE and text
encoder were built from other seeds than the fine-tune configs' (so equal weights mean they were loaded): generated
edits of coloured shapes and photos of one shape. The loss falls, every network starts from the .nemo (the UNet's
new input channels at zero, so it computes what the SD UNet does), the frozen ones end bit-identical, the class
images are the .nemo's own text-to-image, and kill -9 then rerun ends bit-identical (DreamBooth: the path IP2P shares
plus its generated class images)."""

import dataclasses

import pytest
import torch

from nemo_launcher.jobs.multimodal.shapes import shape_example
from nemo_launcher.jobs.stable_diffusion.edit_data import write_edit_shapes
from tests.jobs.vision_support import kill_after_checkpoint, log_dir, losses, run_training, weights, write_config

IP2P, DREAMBOOTH = (
    "nemo_launcher.jobs.stable_diffusion.instruct_pix2pix_train",
    "nemo_launcher.jobs.stable_diffusion.dreambooth_train",
)
RUN = [
    "trainer.log_every_n_steps=1",
    "trainer.max_steps=20",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=10",
    "exp_manager.checkpoint_callback_params.save_top_k=-1",
]
SD_NEMO = "stable_diffusion_tiny/results/checkpoints/nemo_stable_diffusion.nemo"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """(data_dir, results dir holding the SD .nemo the tiny configs start from)."""
    import yaml

    from nemo_launcher.jobs.stable_diffusion.model import build_stable_diffusion, model_section, save_stable_diffusion

    root = tmp_path_factory.mktemp("sd_finetune")
    data, results = root / "data", root / "results"
    model = model_section(yaml.safe_load(write_config(root, data, "stable_diffusion/tiny").read_text())["model"])
    other = dict(
        first_stage_config=dataclasses.replace(model.first_stage_config, seed=5),
        cond_stage_config=dataclasses.replace(model.cond_stage_config, seed=5),
    )
    nemo = results / SD_NEMO
    nemo.parent.mkdir(parents=True)
    save_stable_diffusion(nemo, build_stable_diffusion(dataclasses.replace(model, **other)))
    write_edit_shapes(str(data / "tiny_instruct_pix2pix"), examples=64)
    instances = data / "tiny_dreambooth" / "instance"
    instances.mkdir(parents=True)
    for number, index in enumerate((0, 12, 24, 36)):  # four red circles
        shape_example(index, 0, 32)[0].save(instances / f"{number}.png")
    return data, results


def _config(work, data_dir, results, choice, overrides=()):
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / "cfg.yaml", "training", choice, data_dir=data_dir, base_results_dir=results, overrides=[*RUN, *overrides]
    )


@pytest.fixture(scope="module")
def ip2p_run(workspace, tmp_path_factory):
    data, results = workspace
    return run_training(
        _config(tmp_path_factory.mktemp("ip2p"), data, results, "instruct_pix2pix/tiny"), program=(IP2P,)
    ).stdout


@pytest.fixture(scope="module")
def dreambooth_run(workspace, tmp_path_factory):
    data, results = workspace
    config = _config(tmp_path_factory.mktemp("dreambooth"), data, results, "dreambooth/tiny")
    return config, run_training(config, program=(DREAMBOOTH,)).stdout


def _falls(out):
    seen = losses(out)
    assert sorted(seen) == list(range(1, 21))
    first, last = sum(seen[s] for s in range(1, 6)) / 5, sum(seen[s] for s in range(16, 21)) / 5
    # The tiny networks predict v (conf/_family/latent_diffusion_tiny.yaml), whose loss keeps a floor: what the
    # caption and image cannot tell.
    assert last < 0.85 * first, (first, last)


def _frozen_unchanged(results, run_name, nemo_name, scratch):
    """The frozen networks' weights after training equal the SD .nemo's bit for bit; the UNet moved; the run's
    .nemo loads with them."""
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion

    base = load_stable_diffusion(results / SD_NEMO)
    checkpoints = results / run_name / "results" / "checkpoints"
    trained = weights(checkpoints / "step-20", scratch)
    for prefix, network in (("vae.", base.vae), ("text_encoder.", base.text_encoder)):
        for name, value in network.state_dict().items():
            assert torch.equal(trained[prefix + name], value), prefix + name
    assert not torch.equal(
        trained["unet.mid_block.resnets.0.conv1.weight"], base.unet.state_dict()["mid_block.resnets.0.conv1.weight"]
    )
    saved = load_stable_diffusion(checkpoints / nemo_name)
    for name, value in saved.unet.state_dict().items():
        assert torch.equal(value, trained[f"unet.{name}"]), name
    return saved


def test_instruct_pix2pix_loss_falls_and_only_the_unet_changes(ip2p_run, workspace, tmp_path):
    _falls(ip2p_run)
    saved = _frozen_unchanged(workspace[1], "instruct_pix2pix_tiny", "nemo_instruct_pix2pix.nemo", tmp_path)
    assert saved.unet.config.in_channels == 8  # what edit_cli asks of an InstructPix2Pix .nemo


def _chunk(work, workspace, choice, overrides=()):
    """The fine-tune's networks as its training program builds them at step 0."""
    import yaml

    from nemo_launcher.contract.schemas.sd_finetuning import DreamBoothTrainingConfig, InstructPix2PixTrainingConfig
    from nemo_launcher.jobs.stable_diffusion.finetune import finetune_chunk
    from nemo_launcher.jobs.stable_diffusion.recipe import transformer_config

    schema = InstructPix2PixTrainingConfig if choice.startswith("instruct") else DreamBoothTrainingConfig
    work.mkdir(parents=True, exist_ok=True)
    cfg = schema.from_dict(yaml.safe_load(_config(work, *workspace, choice, overrides).read_text()))
    return finetune_chunk(cfg.model, transformer_config(cfg.model, "fp32", False, False), 0, False, None)


def test_instruct_pix2pix_starts_as_the_sd_checkpoint(workspace, tmp_path):
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion

    data, results = workspace
    base = load_stable_diffusion(results / SD_NEMO)
    chunk = _chunk(tmp_path, workspace, "instruct_pix2pix/tiny")
    for prefix, ours, theirs in (
        ("vae.", chunk.vae, base.vae),
        ("text_encoder.", chunk.text_encoder, base.text_encoder),
    ):
        for name, value in theirs.state_dict().items():
            assert torch.equal(ours.state_dict()[name], value), prefix + name
    unet, sd_unet = chunk.unet.state_dict(), base.unet.state_dict()
    assert unet["conv_in.weight"].shape[1] == 8 and sd_unet["conv_in.weight"].shape[1] == 4
    assert torch.equal(unet["conv_in.weight"][:, :4], sd_unet["conv_in.weight"])
    assert not unet["conv_in.weight"][:, 4:].any()
    assert all(torch.equal(unet[name], value) for name, value in sd_unet.items() if name != "conv_in.weight")
    # So at step 0 the UNet predicts what the SD UNet does, whatever input image's latents sit beside the noisy ones.
    generator = torch.Generator().manual_seed(0)
    noisy, source = torch.randn(2, 4, 16, 16, generator=generator), torch.randn(2, 4, 16, 16, generator=generator)
    context = base.encode_text(["make it blue", "turn it red"])
    with torch.no_grad():
        ours = chunk.unet.eval()(
            torch.cat([noisy, source], dim=1), torch.tensor([10, 500]), encoder_hidden_states=context
        ).sample
        theirs = base.unet(noisy, torch.tensor([10, 500]), encoder_hidden_states=context).sample
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert chunk.unet.conv_in.weight.requires_grad and not any(p.requires_grad for p in chunk.vae.parameters())
    assert not any(p.requires_grad for p in chunk.text_encoder.parameters())


def test_dreambooth_starts_from_the_nemo_and_trains_the_text_encoder_only_when_asked(workspace, tmp_path):
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion

    data, results = workspace
    base = load_stable_diffusion(results / SD_NEMO)
    frozen = _chunk(tmp_path / "a", workspace, "dreambooth/tiny")
    assert all(torch.equal(frozen.unet.state_dict()[n], v) for n, v in base.unet.state_dict().items())
    assert all(torch.equal(frozen.text_encoder.state_dict()[n], v) for n, v in base.text_encoder.state_dict().items())
    assert not any(p.requires_grad for p in frozen.text_encoder.parameters())
    trained = _chunk(tmp_path / "b", workspace, "dreambooth/tiny", ["model.train_text_encoder=true"])
    assert all(p.requires_grad for p in trained.text_encoder.parameters())
    assert not any(p.requires_grad for p in trained.vae.parameters())


def test_dreambooth_loss_falls_on_the_nemos_own_class_images(dreambooth_run, workspace, tmp_path):
    from nemo_launcher.jobs.stable_diffusion.dreambooth_data import image_files
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion
    from nemo_launcher.jobs.stable_diffusion.sampling import Sampling, text_to_images

    _, out = dreambooth_run
    _falls(out)
    assert "8 class images ('a photo of a circle', loss x 0.5)" in out
    data, results = workspace
    _frozen_unchanged(results, "dreambooth_tiny", "nemo_dreambooth.nemo", tmp_path)
    drawn = image_files(data / "tiny_dreambooth" / "regularization")
    assert [p.name for p in drawn] == [f"generated_{n:05d}.png" for n in range(8)]
    # The second batch of four (images 4-7), drawn again from the SD .nemo with its seed: the same pictures.
    import numpy as np
    from PIL import Image

    again = text_to_images(
        load_stable_diffusion(results / SD_NEMO),
        ["a photo of a circle"],
        Sampling(10, "DDIM"),
        7.5,
        4,
        32,
        32,
        torch.Generator().manual_seed(1234 + 4),
    )
    for picture, path in zip(again, drawn[4:]):
        expected = (picture.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
        assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), expected), path


def test_dreambooth_rerun_after_kill_9_is_bit_identical(dreambooth_run, workspace, tmp_path):
    reference_config, reference_out = dreambooth_run
    data, results = workspace
    config = _config(
        tmp_path, data, tmp_path / "results", "dreambooth/tiny", [f"model.restore_from_path={results / SD_NEMO}"]
    )
    checkpoints = log_dir(tmp_path, "dreambooth_tiny") / "checkpoints"
    kill_after_checkpoint(config, DREAMBOOTH, checkpoints / "step-10", tmp_path / "killed.log", checkpoints / "step-20")
    # The reference drew the class images before training; this run found them drawn: the same steps all the same.
    killed = losses((tmp_path / "killed.log").read_text())
    assert killed and killed == {s: v for s, v in losses(reference_out).items() if s in killed}
    resumed = run_training(config, program=(DREAMBOOTH,))
    assert f"resuming from {checkpoints / 'step-10'}" in resumed.stdout
    assert losses(resumed.stdout) == {s: v for s, v in losses(reference_out).items() if s >= 11}
    ours = weights(checkpoints / "step-20", tmp_path)
    theirs = weights(results / "dreambooth_tiny" / "results" / "checkpoints" / "step-20", tmp_path)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key].equal(theirs[key]), key
