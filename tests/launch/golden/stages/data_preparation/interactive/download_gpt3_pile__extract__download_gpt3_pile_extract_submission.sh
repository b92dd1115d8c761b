#!/bin/bash
# Written by nemo_launcher (data_preparation stage). Runs on this machine: bash <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"

# One log per run: a rerun never overwrites an earlier log.
log_stem=<BRD>/download_gpt3_pile/extract/log-download_gpt3_pile_extract_"$(date +%Y%m%d_%H%M%S)_$$"

"${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.data.extract --config <BRD>/download_gpt3_pile/download_gpt3_pile_hydra.yaml 2>&1 | tee -a "${log_stem}.out"
