"""DiT framework inference: `python3 -m nemo_launcher.jobs.dit.sample --config <resolved fw_inference yaml>`.

Builds the DiT the training config describes in one process, loads the newest complete checkpoint's weights,
and for every prompt denoises num_images_per_prompt random latents with a diffusers scheduler over the training
schedule (classifier-free guidance against zeroed text when guidance_scale != 1). Writes PNGs where the latents are
RGB images, every sample's latents, and samples.json; with reference_dir, each prompt's samples are scored by the
nearest class-mean image of the labelled dataset (schema: contract/schemas/dit_inference.py).
"""

import json
import sys
import time
from pathlib import Path

from ..multimodal.latent_classes import nearest_class_scores

PROG = "python3 -m nemo_launcher.jobs.dit.sample"


def _model(training, on_gpu: bool):
    import dataclasses

    from ..core.standalone import start_model_parallel
    from ..core.transformer import cpu_build_context
    from ..vision.saved_models import inference_section
    from .model import dit_chunk, transformer_config

    start_model_parallel(1, 1, seed=training.model.seed)
    # One process: the training speed-ups switched off as for a saved vision model, and no split of the tokens.
    model = dataclasses.replace(inference_section(training.model), context_parallel_size=1, sequence_parallel=False)
    config = transformer_config(model, "fp32", on_gpu, use_te=False)
    with cpu_build_context():
        network = dit_chunk(model, config, 0, False, None)
    return network, model


def sample(cfg, training, log=print) -> dict:
    import torch

    from ..core.conversion import find_checkpoint, load_checkpoint_weights
    from ..core.nemo_archive import load_weights
    from .diffusion import sampling_scheduler
    from .shapes_data import text_embedding

    on_gpu = cfg.accelerator == "gpu"
    device = torch.device("cuda" if on_gpu else "cpu")
    network, model = _model(training, on_gpu)
    checkpoint = find_checkpoint(cfg.checkpoint_dir, "latest")
    load_checkpoint_weights(network, checkpoint, load_weights)
    network.to(device).eval()
    log(f"sampling {checkpoint} with {cfg.sampler}, {cfg.inference_steps} steps, guidance {cfg.guidance_scale}")
    scheduler = sampling_scheduler(model.diffusion, cfg.sampler)
    generator = torch.Generator().manual_seed(cfg.seed)
    n, shape = cfg.num_images_per_prompt, list(model.data.latent_shape)
    results = []
    for prompt in cfg.prompts:
        text = torch.from_numpy(text_embedding(prompt, model.data.text_length, model.text_embedding_dim))
        text = text.to(device).expand(n, -1, -1)
        guided = cfg.guidance_scale != 1.0
        if guided:
            text = torch.cat([text, torch.zeros_like(text)])
        scheduler.set_timesteps(cfg.inference_steps)
        latents = (torch.randn([n] + shape, generator=generator) * scheduler.init_noise_sigma).to(device)
        with torch.no_grad():
            for t in scheduler.timesteps:
                inputs = scheduler.scale_model_input(latents, t)
                if guided:
                    inputs = torch.cat([inputs, inputs])
                out = network(inputs, t.to(device).expand(inputs.shape[0]), text).float()
                if guided:
                    conditional, unconditional = out.chunk(2)
                    out = unconditional + cfg.guidance_scale * (conditional - unconditional)
                latents = scheduler.step(out, t, latents, generator=generator).prev_sample
        results.append(latents.cpu())
    return {"checkpoint": str(checkpoint), "latents": torch.stack(results)}


def write_images(latents, output_dir: Path) -> list[str]:
    """PNG files of RGB single-frame latents ([prompts, images, 3, 1, H, W] in [-1, 1]); none for other latents."""
    from PIL import Image

    if latents.shape[2] != 3 or latents.shape[3] != 1:
        return []
    pixels = ((latents[:, :, :, 0].clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 1, 3, 4, 2).numpy()
    names = []
    for p, images in enumerate(pixels):
        for i, image in enumerate(images):
            name = f"{p:02d}_{i:02d}.png"
            Image.fromarray(image).save(output_dir / name)
            names.append(name)
    return names


def class_means(reference_dir: str):
    """{caption: mean latents} over the labelled samples of an Energon dataset's shards (.pth and .json)."""
    import io
    import tarfile

    import torch

    sums, counts = {}, {}
    for shard in sorted(Path(reference_dir).glob("*.tar")):
        with tarfile.open(shard) as archive:
            members = {m.name: m for m in archive.getmembers() if m.isfile()}
            for name in members:
                if not name.endswith(".json"):
                    continue
                caption = json.loads(archive.extractfile(members[name]).read())["caption"]
                latents = torch.load(
                    io.BytesIO(archive.extractfile(members[name[:-5] + ".pth"]).read()), weights_only=True
                )
                sums[caption] = sums.get(caption, 0) + latents.float()
                counts[caption] = counts.get(caption, 0) + 1
    return {caption: sums[caption] / counts[caption] for caption in sums}


def main(argv=None) -> int:
    started = time.monotonic()
    from ...contract.schemas.dit_inference import RESULTS_FILE, DitSampleConfig
    from ...contract.schemas.dit_training import DitTrainingConfig
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
    from ..common.quiet import start_job
    from ..common.report import Summary, duration, print_error

    try:
        path = config_path_from_argv(argv, prog=PROG)
        start_job(0)
        cfg = DitSampleConfig.from_dict(load_resolved_config(path))
        try:
            training = DitTrainingConfig.from_dict(load_resolved_config(Path(cfg.training_config)))
        except JobConfigError as error:
            raise JobConfigError(f"fw_inference.training_config: {cfg.training_config}: {error}") from None
        output = Path(cfg.output_dir)
        output.mkdir(parents=True, exist_ok=True)
        result = sample(cfg, training)
    except JobConfigError as error:
        return print_error(error)
    import torch

    latents = result["latents"]
    torch.save(latents, output / "latents.pth")
    images = write_images(latents, output)
    report = {
        "checkpoint": result["checkpoint"],
        "prompts": cfg.prompts,
        "sampler": cfg.sampler,
        "inference_steps": cfg.inference_steps,
        "guidance_scale": cfg.guidance_scale,
        "seed": cfg.seed,
        "images": images,
    }
    if cfg.reference_dir:
        report["scores"] = nearest_class_scores(latents, cfg.prompts, class_means(cfg.reference_dir))
    (output / RESULTS_FILE).write_text(json.dumps(report, indent=1))
    summary = Summary(f"sampling finished: {latents.shape[0] * latents.shape[1]} samples of {len(cfg.prompts)} prompts")
    summary.add(
        "images", f"{output} ({len(images)} PNG)" if images else f"{output / 'latents.pth'} (latents; no RGB images)"
    )
    scores = report.get("scores")
    if scores and scores["accuracy"] is not None:
        summary.add(
            "nearest class",
            f"{100 * scores['accuracy']:.0f}% of samples closest to their prompt's class mean "
            f"(chance {100 * scores['chance']:.0f}%)",
        )
    summary.add("results", output / RESULTS_FILE)
    summary.add("time", duration(time.monotonic() - started))
    summary.show(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
