#!/bin/bash
# Written by nemo_launcher (rlhf_eval stage). Runs on this machine: bash <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"

# One log per run: a rerun never overwrites an earlier log.
log_stem=<BRD>/rlhf_eval_tiny/log-rlhf_eval_tiny_"$(date +%Y%m%d_%H%M%S)_$$"

"${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_eval --config <BRD>/rlhf_eval_tiny/rlhf_eval_tiny_hydra.yaml 2>&1 | tee -a "${log_stem}.out"
