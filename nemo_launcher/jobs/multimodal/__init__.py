"""Multimodal data preparation: image-text pairs from parquet files into WebDataset tars, one program per sub-stage.

    python3 -u -m nemo_launcher.jobs.multimodal.<step> --config <job dir>/<run.name>_hydra.yaml

| step               | one Slurm array task handles                     | a rerun skips                          |
|--------------------|--------------------------------------------------|----------------------------------------|
| generate_shapes    | (one job) the synthetic corpus                   | a corpus already written               |
| download_parquet   | (one job) the repository's parquet files         | files whose sub-partitions exist       |
| download_images    | every N-th parquet sub-file (N = array size)     | shards with a `_stats.json` record     |
| reorganize_tar     | its share of the equal-size output tars          | output tars already written            |
| precache_encodings | its share of the tars; its processes split that  | output tars already written            |
| generate_wdinfo    | (one job) wdinfo.pkl                             | -                                      |

Which steps run and how is the schema's steps() (nemo_launcher/contract/schemas/multimodal_data.py). Every output
file is written under a temporary name and renamed when complete, so a killed task leaves nothing that a rerun
would take for finished work. Nothing here imports torch except precache_encodings.
"""
