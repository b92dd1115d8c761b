#!/bin/bash
# Written by nemo_launcher (rlhf_dpo stage). Runs on this machine: bash <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"

# One log per run: a rerun never overwrites an earlier log.
log_stem=<BRD>/gpt3_2b/rlhf_dpo/reference_job/log-dpo_gpt3_2b_reference_"$(date +%Y%m%d_%H%M%S)_$$"

"${NEMO_LAUNCHER_PYTHON:-python3}" -m torch.distributed.run --standalone --nproc_per_node=8 -m nemo_launcher.jobs.gpt.rlhf_dpo_reference --config <BRD>/gpt3_2b/rlhf_dpo/dpo_gpt3_2b_hydra.yaml 2>&1 | tee -a "${log_stem}.out"
