"""The diffusion objective: noise latents at a random step of diffusers' DDPM schedule, ask the DiT for the noise
(epsilon) or the velocity (v = sqrt(a) noise - sqrt(1 - a) x0), score the squared error.

    schedule = noise_schedule(cfg.model.diffusion)             # diffusers DDPMScheduler
    noisy, timesteps, target = noised(schedule, latents, "epsilon", generator)
    sampler = sampling_scheduler(cfg.model.diffusion, "ddim")    # the same betas, for denoising in a few steps
"""

import torch

# The `diffusion:` keys that are diffusers schedulers' own arguments, under the same names.
SCHEDULE_KEYS = ("num_train_timesteps", "beta_schedule", "beta_start", "beta_end", "prediction_type")


def _schedule_settings(diffusion) -> dict:
    return {key: getattr(diffusion, key) for key in SCHEDULE_KEYS}


def noise_schedule(diffusion):
    from diffusers import DDPMScheduler

    return DDPMScheduler(**_schedule_settings(diffusion))


SAMPLERS = ("ddim", "ddpm", "euler", "dpm_solver")


def sampling_scheduler(diffusion, name: str):
    """A diffusers scheduler over the training schedule's betas: DDIM (deterministic), DDPM (ancestral), Euler or
    DPM-Solver++ (multistep)."""
    import diffusers

    cls = {
        "ddim": diffusers.DDIMScheduler,
        "ddpm": diffusers.DDPMScheduler,
        "euler": diffusers.EulerDiscreteScheduler,
        "dpm_solver": diffusers.DPMSolverMultistepScheduler,
    }[name]
    settings = _schedule_settings(diffusion)
    if name == "ddim":
        settings.update(clip_sample=False, set_alpha_to_one=False)
    if name == "ddpm":
        settings.update(clip_sample=False)
    return cls(**settings)


def noised(
    schedule, latents: torch.Tensor, prediction_type: str, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(noisy latents, timesteps [b], the network's target) for clean latents [b, ...]. The draws come from
    `generator`, or the default generator (whose state every checkpoint saves) when it is None."""
    b = latents.shape[0]
    timesteps = torch.randint(
        0,
        schedule.config.num_train_timesteps,
        (b,),
        generator=generator,
        device=latents.device if generator is None else generator.device,
    ).to(latents.device)
    noise = torch.randn(
        latents.shape,
        generator=generator,
        dtype=torch.float32,
        device=latents.device if generator is None else generator.device,
    ).to(latents.device)
    clean = latents.float()
    noisy = schedule.add_noise(clean, noise, timesteps)
    target = noise if prediction_type == "epsilon" else schedule.get_velocity(clean, noise, timesteps)
    return noisy, timesteps, target
