"""Job side: the programs that run on compute nodes (or on this machine for interactive runs).

The contract with the launch side is one file and one command line:

    python3 -u -m nemo_launcher.jobs.<program> --config <job dir>/<run.name>_hydra.yaml

The YAML file is the stage's own config section (`training`, `data_preparation`, ...) with every
interpolation resolved. A job program reads that file and nothing else from the launcher. Distributed
programs take their rank from torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or from
Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the Slurm script exports MASTER_ADDR and MASTER_PORT),
and run as a single process when neither is set. Array jobs read their index from SLURM_ARRAY_TASK_ID
and process every index when it is not set.
"""

from .common import import_hooks as _import_hooks

_import_hooks.install()
