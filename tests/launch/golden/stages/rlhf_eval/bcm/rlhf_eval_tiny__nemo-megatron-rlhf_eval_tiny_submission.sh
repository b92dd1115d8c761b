#!/bin/bash
#SBATCH --dependency=singleton
#SBATCH --error=<BRD>/rlhf_eval_tiny/log-nemo-megatron-rlhf_eval_tiny_%j.err
#SBATCH --exclusive
#SBATCH --job-name=nemo-megatron-rlhf_eval_tiny
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --mem=0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output=<BRD>/rlhf_eval_tiny/log-nemo-megatron-rlhf_eval_tiny_%j.out
#SBATCH --time=0:30:00
# Written by nemo_launcher (rlhf_eval stage). Resubmit by hand with: sbatch <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"
MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"
export MASTER_ADDR
export MASTER_PORT="$((20000 + SLURM_JOB_ID % 20000))"

# One log per attempt: a requeue (SLURM_RESTART_COUNT) or a new job never overwrites an earlier log.
log_stem=<BRD>/rlhf_eval_tiny/log-nemo-megatron-rlhf_eval_tiny_"${SLURM_JOB_ID}"_attempt"${SLURM_RESTART_COUNT:-0}"

srun --kill-on-bad-exit=1 "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_eval --config <BRD>/rlhf_eval_tiny/rlhf_eval_tiny_hydra.yaml >>"${log_stem}.out" 2>>"${log_stem}.err"
