"""The Stable Diffusion trainer on the tiny model: generated coloured shapes precached with conf/_precache/tiny_sd.yaml
through the multimodal pipeline's encoder, the loss falls, the .nemo loads back, kill -9 then rerun ends bit-identical,
precached inputs equal on-the-fly ones, a continuation starts from the named UNet alone.

The runs are sized in epochs, as the seed's 860m_res_256 is (trainer.max_epochs, max_steps null): the job derives
the steps from the shards it lists, stops there, and a killed run resumes to the same step and weights."""

import os
import pickle

import pytest
import torch

from nemo_launcher.jobs.multimodal.tars import AtomicTar, examples
from tests.jobs import warm_python
from tests.jobs.vision_support import (
    REPO,
    kill_after_checkpoint,
    log_dir,
    losses,
    run_training,
    weights,
    write_config,
    write_shape_tars,
)

PROGRAM = "nemo_launcher.jobs.stable_diffusion.train"
RUN = [
    "trainer.log_every_n_steps=1",
    # 7 passes over the 96 examples at the tiny's global batch 16: 42 steps.
    "trainer.max_steps=null",
    "trainer.max_epochs=7",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=10",
    "exp_manager.checkpoint_callback_params.save_top_k=-1",
]


def _precache(raw, out, spec_path):
    from nemo_launcher.jobs.multimodal.precache_encodings import Encoder, load_spec

    encoder = Encoder(load_spec(str(spec_path)))
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(raw)):
        batch = list(examples(str(raw / name)))
        with AtomicTar(str(out / name)) as tar:
            for (key, members), encoded in zip(batch, encoder.encode([m for _, m in batch])):
                tar.write({"__key__": key, "pickle": pickle.dumps(encoded, protocol=4), "txt": members[".txt"]})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    data = tmp_path_factory.mktemp("sd_data")
    write_shape_tars(data / "raw", examples=96, per_tar=48)
    _precache(data / "raw", data / "tiny_sd" / "precached", REPO / "conf" / "_precache" / "tiny_sd.yaml")
    return data


def _config(work, data_dir, overrides=()):
    return write_config(
        work,
        data_dir,
        "stable_diffusion/tiny",
        [f"model.data.train.dataset_path=[{data_dir}/tiny_sd/precached]", *RUN, *overrides],
    )


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("sd_baseline")
    result = run_training(_config(work, data_dir), program=(PROGRAM,))
    return work, result.stdout


def test_loss_falls_and_the_nemo_holds_the_averaged_unet(baseline):
    work, out = baseline
    assert "run length: max_epochs=7 over 96 samples at global batch 16 = 42 optimizer steps" in out
    seen = losses(out)
    assert sorted(seen) == list(range(1, 43))
    first, last = sum(seen[s] for s in range(1, 6)) / 5, sum(seen[s] for s in range(38, 43)) / 5
    assert last < 0.7 * first, (first, last)
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion

    checkpoints = log_dir(work, "stable_diffusion_tiny") / "checkpoints"
    saved = load_stable_diffusion(checkpoints / "nemo_stable_diffusion.nemo")
    trained = weights(checkpoints / "step-42", work)
    # The .nemo holds the EMA average of the UNet, saved beside the weights in the checkpoint; the frozen VAE and
    # text encoder are unchanged by training, have no average, and are saved as they are.
    for name, value in saved.unet.state_dict().items():
        assert torch.equal(value, trained[f"ema.unet.{name}"].to(value.dtype)), name
    assert not [key for key in trained if key.startswith(("ema.vae.", "ema.text_encoder."))]
    for name, value in saved.vae.state_dict().items():
        assert torch.equal(value, trained[f"vae.{name}"]), name
    assert saved.encode_text(["a photo of a red circle"]).shape == (1, 48, 32)


def test_the_checkpoint_folder_loads_like_the_nemo(baseline):
    import subprocess

    work, _ = baseline
    checkpoints = log_dir(work, "stable_diffusion_tiny") / "checkpoints"
    script = (
        "import sys, torch\nfrom nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion\n"
        "a = load_stable_diffusion(sys.argv[1]); b = load_stable_diffusion(sys.argv[2])\n"
        "print(sorted(a.state_dict()) == sorted(b.state_dict()), all(torch.equal(v, b.state_dict()[k]) "
        "for k, v in a.state_dict().items() if not k.startswith('unet.')))\n"
    )
    # A step folder holds the trained weights, the .nemo their average: the networks and every frozen weight agree.
    result = subprocess.run(
        [warm_python.interpreter(), "-c", script, str(checkpoints), str(checkpoints / "nemo_stable_diffusion.nemo")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=warm_python.environment(dict(os.environ, PYTHONPATH=str(REPO))),
    )
    assert result.stdout.split() == ["True", "True"], result.stderr[-3000:]


def test_rerun_after_kill_9_is_bit_identical(baseline, data_dir, tmp_path):
    reference, reference_out = baseline
    config = _config(tmp_path, data_dir)
    checkpoints = log_dir(tmp_path, "stable_diffusion_tiny") / "checkpoints"
    kill_after_checkpoint(config, PROGRAM, checkpoints / "step-20", tmp_path / "killed.log", checkpoints / "step-30")
    resumed = run_training(config, program=(PROGRAM,))
    assert f"resuming from {checkpoints / 'step-20'}" in resumed.stdout
    assert losses(resumed.stdout) == {s: v for s, v in losses(reference_out).items() if s >= 21}
    assert "run length: max_epochs=7 over 96 samples at global batch 16 = 42 optimizer steps" in resumed.stdout
    ours = weights(checkpoints / "step-42", tmp_path)
    theirs = weights(log_dir(reference, "stable_diffusion_tiny") / "checkpoints" / "step-42", tmp_path)
    assert ours.keys() == theirs.keys() and any(k.startswith("ema.unet.") for k in ours)
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_precached_inputs_equal_what_training_encodes_on_the_fly(data_dir):
    import yaml

    from nemo_launcher.jobs.common.config import bind
    from nemo_launcher.jobs.stable_diffusion.data import image_pixels
    from nemo_launcher.jobs.stable_diffusion.model import build_stable_diffusion, model_section
    from nemo_launcher.jobs.vision.images import decode
    from nemo_launcher.launch.stage_config import write_stage_config

    path = write_stage_config(
        data_dir / "cfg.yaml",
        "training",
        "stable_diffusion/tiny",
        data_dir=data_dir,
        base_results_dir=data_dir / "results",
        overrides=[],
    )
    parts = build_stable_diffusion(model_section(yaml.safe_load(path.read_text())["model"]))
    ((_, raw),) = [next(examples(str(data_dir / "raw" / "00000.tar")))]
    ((_, cached),) = [next(examples(str(data_dir / "tiny_sd" / "precached" / "00000.tar")))]
    stored = pickle.loads(cached[".pickle"])
    with torch.no_grad():
        pixels = torch.from_numpy(image_pixels(decode(raw[".jpg"]), 32))[None]
        moments = parts.vae.encode(pixels).latent_dist.parameters[0]
        context = parts.encode_text([raw[".txt"].decode()])[0]
    assert torch.allclose(torch.from_numpy(stored["tiny-vae_image"]), moments, atol=1e-5)
    assert torch.allclose(torch.from_numpy(stored["tiny-clip_text"]), context, atol=1e-5)
    assert bind  # the schema binding is what model_section used


def test_a_continuation_starts_from_the_named_unet_alone(baseline, data_dir, tmp_path):
    work, _ = baseline
    nemo = log_dir(work, "stable_diffusion_tiny") / "checkpoints" / "nemo_stable_diffusion.nemo"
    config = _config(
        tmp_path,
        data_dir,
        [
            f"model.unet_config.from_pretrained={nemo}",
            "trainer.max_steps=10",
            "trainer.max_epochs=null",
            "model.text_embedding_dropout_rate=0.1",
            "model.first_stage_config.seed=7",
        ],
    )
    run_training(config, program=(PROGRAM,))
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion

    started = weights(log_dir(tmp_path, "stable_diffusion_tiny") / "checkpoints" / "step-10", tmp_path)
    base = load_stable_diffusion(nemo)
    # Ten steps at lr 1e-3 move the UNet a little from the .nemo's and not at all from a fresh initialisation's
    # distance; the VAE is the run's own (seed 7), not the .nemo's.
    distance = sum((started[f"unet.{k}"] - v).pow(2).sum() for k, v in base.unet.state_dict().items()).sqrt()
    norm = sum(v.pow(2).sum() for v in base.unet.state_dict().values()).sqrt()
    assert distance < 0.2 * norm
    assert not torch.equal(started["vae.encoder.conv_in.weight"], base.vae.state_dict()["encoder.conv_in.weight"])


def test_a_warm_up_longer_than_the_derived_run_is_refused_before_training(data_dir, tmp_path):
    """The launcher cannot count a folder of tars; the job does, then checks the schedule against the steps."""
    config = _config(tmp_path, data_dir, ["trainer.max_epochs=1", "model.optim.sched.constant_steps=3"])
    result = run_training(config, program=(PROGRAM,), expect_rc=2)
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: training.model.optim.sched.warmup_steps=5: warmup_steps(5) + constant_steps(3) must be below the "
        "run's max_epochs=1 over 96 samples at global batch 16 = 6 optimizer steps to leave a step of cosine decay; "
        "lower warmup_steps or constant_steps, or raise trainer.max_epochs"
    )
    assert not (log_dir(tmp_path, "stable_diffusion_tiny") / "checkpoints").exists()


def test_the_job_and_the_launcher_count_a_listing_alike(data_dir, tmp_path):
    """A wdinfo.pkl of the precached tars: the job's count (the shards it will read) is the launcher's."""
    import yaml

    from nemo_launcher.contract.epochs import wdinfo_examples
    from nemo_launcher.contract.schemas.stable_diffusion_training import StableDiffusionTrainingConfig
    from nemo_launcher.jobs.multimodal.generate_wdinfo import wdinfo
    from nemo_launcher.jobs.stable_diffusion.data import train_examples

    listing = tmp_path / "wdinfo.pkl"
    tars = data_dir / "tiny_sd" / "precached"
    listing.write_bytes(pickle.dumps(wdinfo(str(tars), str(tmp_path), 48, [".pickle", ".txt"])))
    config = _config(tmp_path, data_dir, [f"model.data.train.dataset_path=[{listing}]", "trainer.max_epochs=2"])
    cfg = StableDiffusionTrainingConfig.from_dict(yaml.safe_load(config.read_text()))
    assert train_examples(cfg) == wdinfo_examples(str(listing)) == 96
    assert cfg.sized_by_epochs(train_examples(cfg))[0].trainer.max_steps == 12
