"""Data preparation job programs: download, extract, train a tokenizer, tokenize into Megatron datasets.

Each step is its own program, run by the launcher as

    python3 -u -m nemo_launcher.jobs.data.<step> --config <job dir>/<run.name>_hydra.yaml

with the resolved `data_preparation` section as the YAML. Steps (and the keys that switch them on):

| step            | runs when                              | one Slurm array task handles      |
|-----------------|----------------------------------------|-----------------------------------|
| download        | download_the_pile (Pile configs)       | one file number                   |
| extract         | download_the_pile (Pile configs)       | one file number                   |
| train_tokenizer | train_tokenizer (custom_dataset)       | (not an array: one task)          |
| preprocess      | preprocess_data                        | one file number (Pile) or one node index (custom_dataset) |

Without SLURM_ARRAY_TASK_ID a step handles every item itself, one after another (interactive runs); with
RANK/WORLD_SIZE (BCP, mpirun) it takes every WORLD_SIZE-th item. Every step skips work whose final output
already exists, so rerunning a pipeline after a failure continues where it stopped.

Nothing here imports torch or megatron: workers start fast and the output format is written directly
(indexed_format.py); megatron-core reads the result.
"""
