#!/bin/bash
# Written by nemo_launcher (training stage) for Base Command Platform: bash <this file> inside the NGC job.
set -euo pipefail

log_stem=<BRD>/gpt3_5b/log-gpt3_5b_"$(date +%m%d_%H%M%S)"

bcprun --nnodes 16 --npernode 8 --env TRANSFORMERS_OFFLINE=1 --env TORCH_NCCL_AVOID_RECORD_STREAMS=1 --env 'NEMO_LAUNCHER_NUMA_MAPPING={"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}' --env NCCL_NVLS_ENABLE=0 --env NVTE_DP_AMAX_REDUCE_INTERVAL=0 --env NVTE_ASYNC_AMAX_REDUCTION=1 --env NVTE_FUSED_ATTN=0 --env PYTHONPATH=/opt/launcher --cmd 'python3 -u -m nemo_launcher.jobs.gpt.train --config <BRD>/gpt3_5b/gpt3_5b_hydra.yaml' 2>&1 | tee -a "${log_stem}.out"
