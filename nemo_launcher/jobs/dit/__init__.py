"""DiT (diffusion transformer) jobs on megatron-core; training runs on the trainer core with DiT's recipe:

    python3 -u -m nemo_launcher.jobs.dit.train --config <job dir>/<run.name>_hydra.yaml

| module      | holds                                                                                      |
|-------------|--------------------------------------------------------------------------------------------|
| train       | the program: the core's run_program with the DiT schema, recipe, parts and module          |
| recipe      | forward step and diffusion loss, the parts builder, the module keeping the loader state     |
| model       | the DiT: patchify, adaLN-Zero layers on megatron-core attention/MLP, FLOPs per token       |
| diffusion   | the noise schedule and samplers (diffusers schedulers), noised latents and targets          |
| data        | seed 002's mock latents, and the Energon stream of .pth/.pickle/.json samples              |
"""
