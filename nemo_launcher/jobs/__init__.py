"""Job side: the programs that run on compute nodes (or on this machine for interactive runs).

The contract with the launch side is one file and one command line:

    python3 -u -m nemo_launcher.jobs.<program> --config <job dir>/<run.name>_hydra.yaml

The YAML file is the stage's own config section (`training`, `data_preparation`, ...) with every
interpolation resolved. A job program reads that file and nothing else from the launcher. Distributed
programs take their rank from torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or from
Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the Slurm script exports MASTER_ADDR and MASTER_PORT),
and run as a single process when neither is set. Array jobs read their index from SLURM_ARRAY_TASK_ID
and process every index when it is not set.

Packages form layers; each imports only packages of lower layers (tests/test_layering.py holds this, imports
inside functions included):

    common  config reading, process group, run directory, reports, tokenizers, the job error family
    core    trainer core, checkpoints, conversion flow, the .nemo archive, inference set-up
    steps   the data-step framework (step config, report, fetch) that every data step builds on
    wings   shared by several families, each taking a per-family record, never branching on a family's name:
            serving (Triton helpers), tuning (PEFT methods), multimodal (image-text data, caption tokenizer),
            data (the text pipeline); then vision (image towers, conversion, export), which builds on the first, and
            rlhf (reward models, DPO, PPO), which builds on tuning
    families one package each (fid_evaluation: the diffusion families' evaluation)

LAYERS is read by that test with `ast` (the job side is not imported there): keep it a literal.
"""

from .common import import_hooks as _import_hooks

_import_hooks.install()

LAYERS = {
    "common": 0,
    "core": 1,
    "steps": 1,
    "serving": 2,
    "tuning": 2,
    "multimodal": 2,
    "data": 2,
    "rlhf": 3,
    "vision": 3,
    "gpt": 4,
    "t5": 4,
    "bert": 4,
    "vit": 4,
    "clip": 4,
    "stable_diffusion": 4,
    "dit": 4,
    "fid_evaluation": 4,
    "autoconfig": 4,
}

# Imports between packages of one layer that are part of the design, each with its reason. Nothing else in a
# layer imports its neighbours.
SAME_LAYER_IMPORTS = {
    # The FID/CLIP evaluation generates its images with the Stable Diffusion model it scores.
    ("fid_evaluation", "stable_diffusion"): "FID evaluation samples the Stable Diffusion model it scores",
    # The AutoConfigurator's inference search times GPT's own loading and generation path.
    ("autoconfig", "gpt"): "the inference search benchmarks the GPT model it loads from a .nemo",
}
