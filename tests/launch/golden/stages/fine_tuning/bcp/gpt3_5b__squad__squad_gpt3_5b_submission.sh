#!/bin/bash
# Written by nemo_launcher (fine_tuning stage) for Base Command Platform: bash <this file> inside the NGC job.
set -euo pipefail

log_stem=<BRD>/gpt3_5b/squad/log-squad_gpt3_5b_"$(date +%m%d_%H%M%S)"

bcprun --nnodes 1 --npernode 1 --env TRANSFORMERS_OFFLINE=1 --env TORCH_NCCL_AVOID_RECORD_STREAMS=1 --env 'NEMO_LAUNCHER_NUMA_MAPPING={"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}' --env CUDA_DEVICE_MAX_CONNECTIONS=1 --env PYTHONPATH=/opt/launcher --cmd 'python3 -u -m nemo_launcher.jobs.data.squad --config <BRD>/gpt3_5b/squad/squad_gpt3_5b_hydra.yaml' 2>&1 | tee -a "${log_stem}.out"

bcprun --nnodes 1 --npernode 8 --env TRANSFORMERS_OFFLINE=1 --env TORCH_NCCL_AVOID_RECORD_STREAMS=1 --env 'NEMO_LAUNCHER_NUMA_MAPPING={"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}' --env CUDA_DEVICE_MAX_CONNECTIONS=1 --env PYTHONPATH=/opt/launcher --cmd 'python3 -u -m nemo_launcher.jobs.gpt.finetune --config <BRD>/gpt3_5b/squad/squad_gpt3_5b_hydra.yaml' 2>&1 | tee -a "${log_stem}.out"
