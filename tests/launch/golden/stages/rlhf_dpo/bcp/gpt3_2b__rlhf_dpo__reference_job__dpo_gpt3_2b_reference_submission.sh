#!/bin/bash
# Written by nemo_launcher (rlhf_dpo stage) for Base Command Platform: bash <this file> inside the NGC job.
set -euo pipefail

log_stem=<BRD>/gpt3_2b/rlhf_dpo/reference_job/log-dpo_gpt3_2b_reference_"$(date +%m%d_%H%M%S)"

bcprun --nnodes 1 --npernode 8 --env TRANSFORMERS_OFFLINE=1 --env TORCH_NCCL_AVOID_RECORD_STREAMS=1 --env 'NEMO_LAUNCHER_NUMA_MAPPING={"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}' --env CUDA_DEVICE_MAX_CONNECTIONS=1 --env PYTHONPATH=/opt/launcher --cmd 'python3 -u -m nemo_launcher.jobs.gpt.rlhf_dpo_reference --config <BRD>/gpt3_2b/rlhf_dpo/dpo_gpt3_2b_hydra.yaml' 2>&1 | tee -a "${log_stem}.out"
