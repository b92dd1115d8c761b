#!/bin/bash
# Written by nemo_launcher (rlhf_eval stage) for Base Command Platform: bash <this file> inside the NGC job.
set -euo pipefail

log_stem=<BRD>/rlhf_eval_tiny/log-rlhf_eval_tiny_"$(date +%m%d_%H%M%S)"

bcprun --nnodes 1 --npernode 1 --env TRANSFORMERS_OFFLINE=1 --env TORCH_NCCL_AVOID_RECORD_STREAMS=1 --env 'NEMO_LAUNCHER_NUMA_MAPPING={"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}' --env PYTHONPATH=/opt/launcher --cmd 'python3 -u -m nemo_launcher.jobs.gpt.rlhf_eval --config <BRD>/rlhf_eval_tiny/rlhf_eval_tiny_hydra.yaml' 2>&1 | tee -a "${log_stem}.out"
