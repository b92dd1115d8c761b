#!/bin/bash
#SBATCH --account=llm
#SBATCH --dependency=singleton
#SBATCH --error=<BRD>/gpt3_5b/log-nemo-megatron-gpt3_5b_%j.err
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --job-name=nemo-megatron-gpt3_5b
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --mem=0
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=8
#SBATCH --open-mode=append
#SBATCH --output=<BRD>/gpt3_5b/log-nemo-megatron-gpt3_5b_%j.out
#SBATCH --partition=batch
#SBATCH --requeue
#SBATCH --signal=USR1@300
#SBATCH --time=6-00:00:00
# Written by nemo_launcher (training stage). Resubmit by hand with: sbatch <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export NCCL_NVLS_ENABLE=0
export NVTE_DP_AMAX_REDUCE_INTERVAL=0
export NVTE_ASYNC_AMAX_REDUCTION=1
export NVTE_FUSED_ATTN=0
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"
WANDB_API_KEY="$(head -n 1 <BRD>/wandb.key)"
[[ -n "${WANDB_API_KEY}" ]] || { echo 'WANDB_API_KEY: <BRD>/wandb.key is empty or unreadable on this node' >&2; exit 1; }
export WANDB_API_KEY
MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"
export MASTER_ADDR
export MASTER_PORT="$((20000 + SLURM_JOB_ID % 20000))"

# One log per attempt: a requeue (SLURM_RESTART_COUNT) or a new job never overwrites an earlier log.
log_stem=<BRD>/gpt3_5b/log-nemo-megatron-gpt3_5b_"${SLURM_JOB_ID}"_attempt"${SLURM_RESTART_COUNT:-0}"

srun --kill-on-bad-exit=1 --container-image='nvcr.io#example/launcher:1.0' --container-mounts=/opt/launcher:/opt/launcher,/data:/data,<BRD>:<BRD>,/lustre:/lustre,/scratch:/mnt/scratch --no-container-mount-home --container-env=TRANSFORMERS_OFFLINE,TORCH_NCCL_AVOID_RECORD_STREAMS,NEMO_LAUNCHER_NUMA_MAPPING,NCCL_NVLS_ENABLE,NVTE_DP_AMAX_REDUCE_INTERVAL,NVTE_ASYNC_AMAX_REDUCTION,NVTE_FUSED_ATTN,PYTHONPATH,WANDB_API_KEY,MASTER_ADDR,MASTER_PORT "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.train --config <BRD>/gpt3_5b/gpt3_5b_hydra.yaml >>"${log_stem}.out" 2>>"${log_stem}.err"

# The job stopped before its last step (time limit, max_time) and saved a checkpoint: queue the next attempt.
if [[ -f <BRD>/gpt3_5b/results/RESUME_NEEDED ]]; then
  scontrol requeue "${SLURM_JOB_ID}"
fi
