"""Conversion of the vision families (conversion=clip/convert_clip; ViT's is in test_vit_train.py, on its baseline):
a tiny CLIP trained with CLIP's BPE (a letters-only vocabulary) and EMA converts to the .nemo the finished run wrote
itself (the average, not the weights), to a TP=2 archive whose merged shards are that average too, and to a
transformers CLIPModel whose image and text embeddings are our model's within 1e-5 (measured against the
.nemo as load_vision_model reads it, in its own process)."""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from nemo_launcher.jobs.multimodal.shapes import shape_example
from tests.jobs import warm_python
from tests.jobs.fid_support import write_tiny_clip
from tests.jobs.gpt_train_support import environment
from tests.jobs.vision_support import (
    REPO,
    layers_stacked,
    log_dir,
    module_names,
    nemo_state,
    run_training,
    weights,
    write_config,
    write_shape_tars,
)

TRAIN = "nemo_launcher.jobs.clip.train"
CONVERT = "nemo_launcher.jobs.vision.convert"
CAPTIONS = ["a photo of a red circle", "a blue square", "a drawing of a green triangle"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(work folder, training config, tokenizer folder) of a 4-step CLIP run with CLIP's BPE, checkpoints at 2 and 4."""
    work = tmp_path_factory.mktemp("clip_bpe")
    write_shape_tars(work / "data" / "tiny_shapes" / "tarfiles_reorganized", examples=64, per_tar=32)
    vocab = Path(write_tiny_clip(str(work / "bpe")))
    config = write_config(
        work,
        work / "data",
        "clip/tiny",
        [
            "trainer.max_steps=4",
            "trainer.log_every_n_steps=1",
            "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
            "exp_manager.ema.decay=0.5",
            "model.global_batch_size=16",
            "model.micro_batch_size=16",
            "model.optim.sched.warmup_steps=1",
            "model.tokenizer.library=clip",
            f"model.tokenizer.vocab_file={vocab}/vocab.json",
            f"model.tokenizer.merge_file={vocab}/merges.txt",
        ],
    )
    run_training(config, program=(TRAIN,))
    return work, config


def _convert(work: Path, config: Path, overrides, processes: int = 1, name: str = "conv.yaml"):
    from nemo_launcher.launch.stage_config import write_stage_config

    conversion = write_stage_config(
        work / name,
        "conversion",
        "clip/convert_clip",
        data_dir=work / "data",
        base_results_dir=work / "results",
        overrides=["run.model_train_name=clip_tiny", f"model.hparams_file={config}", *overrides],
    )
    return run_training(conversion, processes=processes, program=(CONVERT,))


_EMBED = """
import json, sys, torch
from nemo_launcher.jobs.common.quiet import start_job
start_job(0)
from nemo_launcher.jobs.vision.saved_models import load_vision_model
from transformers import CLIPModel
saved = load_vision_model(sys.argv[1])
images = torch.stack([saved.pixels(path) for path in sys.argv[4:]])
texts = json.loads(sys.argv[3])
ours_image, ours_text = saved.image_features(images), saved.text_features(texts)
hf = CLIPModel.from_pretrained(sys.argv[2]).eval()
with torch.no_grad():
    out = hf(input_ids=saved.tokens(texts), pixel_values=images)
print(json.dumps({"image": (out.image_embeds - ours_image).abs().max().item(),
                  "text": (out.text_embeds - ours_text).abs().max().item(),
                  "scale": [hf.logit_scale.exp().item(), saved.logit_scale()]}))
"""


def test_tp1_conversion_is_the_runs_ema_nemo_and_transformers_gives_its_embeddings(trained, tmp_path):
    work, config = trained
    result = _convert(work, config, ["hf.mode=required"])
    nemo = work / "results" / "clip_tiny" / "convert_nemo" / "results" / "nemo_clip.nemo"
    hf_dir = nemo.parent / "hf"
    assert str(nemo) in result.stdout and "CLIPModel" in result.stdout
    converted, written = nemo_state(nemo), nemo_state(log_dir(work, "clip_tiny") / "checkpoints" / "nemo_clip.nemo")
    assert converted[1].keys() == written[1].keys()
    for key in written[1]:
        assert converted[1][key].equal(written[1][key]), key
    # The BPE files travel inside the .nemo (read back into a temporary folder).
    assert Path(converted[0]["tokenizer"]["vocab_file"]).read_bytes() == (work / "bpe" / "vocab.json").read_bytes()
    images = []
    for index in range(3):
        images.append(tmp_path / f"{index}.png")
        shape_example(500 + index, 0, 64)[0].save(images[-1])
    probe = subprocess.run(
        [warm_python.interpreter(), "-c", _EMBED, str(nemo), str(hf_dir), json.dumps(CAPTIONS), *map(str, images)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    gaps = json.loads(probe.stdout.strip().splitlines()[-1])
    assert gaps["image"] < 1e-5 and gaps["text"] < 1e-5, gaps
    assert gaps["scale"][0] == pytest.approx(gaps["scale"][1], rel=1e-6)


def test_tp2_conversion_of_an_earlier_checkpoint_merges_to_its_average(trained, tmp_path):
    from nemo_launcher.jobs.core.nemo_archive import load_nemo_shard, read_nemo_config
    from nemo_launcher.jobs.core.shards import merge_shards
    from nemo_launcher.jobs.vision.saved_models import vision_shard_layout

    work, config = trained
    result = _convert(
        work,
        config,
        [
            "model.tensor_model_parallel_size=2",
            "model.checkpoint_name=step-2",
            "run.convert_name=convert_tp2",
            "hf.mode=off",
        ],
        processes=2,
        name="tp2.yaml",
    )
    nemo = work / "results" / "clip_tiny" / "convert_tp2" / "results" / "nemo_clip.nemo"
    assert "step-2" in result.stdout
    saved = read_nemo_config(nemo)
    assert saved["tensor_model_parallel_size"] == 2 and saved["vision_saved_model"]["family"] == "clip"
    shards = {(rank, 0): load_nemo_shard(nemo, rank, 0) for rank in range(2)}
    assert shards[(0, 0)]["vision.decoder.layers.0.self_attention.linear_qkv.weight"].shape[0] == 48  # half of 3 x 32
    merged = layers_stacked(merge_shards(shards, vision_shard_layout(saved, 2)))
    checkpoint = module_names(weights(log_dir(work, "clip_tiny") / "checkpoints" / "step-2", tmp_path))
    average = {key[len("ema.") :]: value for key, value in checkpoint.items() if key.startswith("ema.")}
    assert merged.keys() == average.keys()
    for key in average:
        assert merged[key].equal(average[key]), key
    assert not torch.equal(average["text_projection.weight"], checkpoint["text_projection.weight"])
