"""Data preparation job programs: download, extract, train a tokenizer, tokenize into Megatron datasets.

Each step is its own program, run by the launcher as

    python3 -u -m nemo_launcher.jobs.data.<step> --config <job dir>/<run.name>_hydra.yaml

with the resolved `data_preparation` section as the YAML. Steps (and the keys that switch them on):

| step             | runs when                                  | one Slurm array task handles                     |
|------------------|--------------------------------------------|--------------------------------------------------|
| prepare          | download_mc4 (mC4)                         | (one job: lists the repository, shares files out)|
| download         | download_the_pile (Pile), download_mc4     | one file number (Pile) or one node's files (mC4) |
| extract          | download_the_pile (Pile)                   | one file number                                  |
| setup_preprocess | preprocess_data (mC4)                      | (one job: splits, links, shares splits out)      |
| train_tokenizer  | train_tokenizer                            | (one job)                                        |
| preprocess       | preprocess_data                            | one file number (Pile), one node index           |
|                  |                                            | (custom_dataset), one node of                    |
|                  |                                            | run.workers_per_node tasks (mC4)                 |

Which steps a dataset runs, and how (array or single, tasks per node, CPUs per task), is its schema's steps()
(nemo_launcher/contract/schemas/data_preparation.py); the launcher submits exactly that. With split_sentences
(BERT, T5, mT5) every document becomes one indexed item per sentence (sentences.py).

Without SLURM_ARRAY_TASK_ID a step handles every item itself, one after another (interactive runs); with
RANK/WORLD_SIZE (BCP, mpirun) it takes every WORLD_SIZE-th item. Every step skips work whose final output
already exists, so rerunning a pipeline after a failure continues where it stopped.

Nothing here imports torch or megatron: workers start fast and the output format is written directly
(indexed_format.py); megatron-core reads the result.
"""
