#!/bin/bash
# Written by nemo_launcher (data_preparation stage) for Base Command Platform: bash <this file> inside the NGC job.
set -euo pipefail

log_stem=<BRD>/download_gpt3_pile/extract/log-download_gpt3_pile_extract_"$(date +%m%d_%H%M%S)"

bcprun --nnodes 30 --npernode 1 --launcher 'mpirun --allow-run-as-root' --env TRANSFORMERS_OFFLINE=1 --env TORCH_NCCL_AVOID_RECORD_STREAMS=1 --env 'NEMO_LAUNCHER_NUMA_MAPPING={"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}' --env PYTHONPATH=/opt/launcher --cmd 'python3 -u -m nemo_launcher.jobs.data.extract --config <BRD>/download_gpt3_pile/download_gpt3_pile_hydra.yaml' 2>&1 | tee -a "${log_stem}.out"
