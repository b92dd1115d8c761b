#!/bin/bash
#SBATCH --dependency=singleton
#SBATCH --error=<BRD>/gpt3_2b/rlhf_dpo/log-nemo-megatron-dpo_gpt3_2b_%j.err
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --job-name=nemo-megatron-dpo_gpt3_2b
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --mem=0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --open-mode=append
#SBATCH --output=<BRD>/gpt3_2b/rlhf_dpo/log-nemo-megatron-dpo_gpt3_2b_%j.out
#SBATCH --requeue
#SBATCH --signal=USR1@300
#SBATCH --time=1-00:00:00
# Written by nemo_launcher (rlhf_dpo stage). Resubmit by hand with: sbatch <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"
MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"
export MASTER_ADDR
export MASTER_PORT="$((20000 + SLURM_JOB_ID % 20000))"

# One log per attempt: a requeue (SLURM_RESTART_COUNT) or a new job never overwrites an earlier log.
log_stem=<BRD>/gpt3_2b/rlhf_dpo/log-nemo-megatron-dpo_gpt3_2b_"${SLURM_JOB_ID}"_attempt"${SLURM_RESTART_COUNT:-0}"

srun --kill-on-bad-exit=1 "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_dpo --config <BRD>/gpt3_2b/rlhf_dpo/dpo_gpt3_2b_hydra.yaml >>"${log_stem}.out" 2>>"${log_stem}.err"

# The job stopped before its last step (time limit, max_time) and saved a checkpoint: queue the next attempt.
if [[ -f <BRD>/gpt3_2b/rlhf_dpo/results/RESUME_NEEDED ]]; then
  scontrol requeue "${SLURM_JOB_ID}"
fi
