#!/bin/bash
#SBATCH --error=<BRD>/rlhf_2b_actor_2b_critic/log-nemo-megatron-rlhf_2b_actor_2b_critic_%j.err
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --job-name=nemo-megatron-rlhf_2b_actor_2b_critic
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --mem=0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --open-mode=append
#SBATCH --output=<BRD>/rlhf_2b_actor_2b_critic/log-nemo-megatron-rlhf_2b_actor_2b_critic_%j.out
#SBATCH --requeue
#SBATCH --signal=USR1@300
#SBATCH --time=4-00:00:00
#SBATCH hetjob
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --mem=0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --signal=USR1@300
#SBATCH --time=4-00:00:00
#SBATCH hetjob
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --mem=0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --signal=USR1@300
#SBATCH --time=4-00:00:00
#SBATCH hetjob
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --mem=0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --signal=USR1@300
#SBATCH --time=4-00:00:00
# Written by nemo_launcher (rlhf_ppo stage). Resubmit by hand with: sbatch <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"
MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"
export MASTER_ADDR
export MASTER_PORT="$((20000 + SLURM_JOB_ID % 20000))"

# One log per attempt: a requeue (SLURM_RESTART_COUNT) or a new job never overwrites an earlier log.
log_stem=<BRD>/rlhf_2b_actor_2b_critic/log-nemo-megatron-rlhf_2b_actor_2b_critic_"${SLURM_JOB_ID}"_attempt"${SLURM_RESTART_COUNT:-0}"

# Each group's first host: where the other groups find its server, and its torch.distributed master.
group_host_0="$(scontrol show hostnames "${SLURM_JOB_NODELIST_HET_GROUP_0}" | head -n 1)"
group_host_1="$(scontrol show hostnames "${SLURM_JOB_NODELIST_HET_GROUP_1}" | head -n 1)"
group_host_2="$(scontrol show hostnames "${SLURM_JOB_NODELIST_HET_GROUP_2}" | head -n 1)"
group_host_3="$(scontrol show hostnames "${SLURM_JOB_NODELIST_HET_GROUP_3}" | head -n 1)"
NEMO_RLHF_REWARD_MODEL_HOST="${group_host_0}"
export NEMO_RLHF_REWARD_MODEL_HOST
NEMO_RLHF_INITIAL_POLICY_HOST="${group_host_1}"
export NEMO_RLHF_INITIAL_POLICY_HOST
NEMO_RLHF_CRITIC_HOST="${group_host_2}"
export NEMO_RLHF_CRITIC_HOST

# The job's groups, started together; the first to end ends the job with its exit status.
group_names=()
group_pids=()
MASTER_ADDR="${group_host_0}" MASTER_PORT="$((MASTER_PORT + 0))" srun --kill-on-bad-exit=1 --het-group=0 "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_ppo_reward_model --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml >>"${log_stem}_reward_model.out" 2>>"${log_stem}_reward_model.err" &
group_pids+=("$!")
group_names+=(reward_model)
echo "[monitor] started reward_model (pid $!)"
MASTER_ADDR="${group_host_1}" MASTER_PORT="$((MASTER_PORT + 1))" srun --kill-on-bad-exit=1 --het-group=1 "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml >>"${log_stem}_initial_policy.out" 2>>"${log_stem}_initial_policy.err" &
group_pids+=("$!")
group_names+=(initial_policy)
echo "[monitor] started initial_policy (pid $!)"
MASTER_ADDR="${group_host_2}" MASTER_PORT="$((MASTER_PORT + 2))" srun --kill-on-bad-exit=1 --het-group=2 "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_ppo_critic --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml >>"${log_stem}_critic.out" 2>>"${log_stem}_critic.err" &
group_pids+=("$!")
group_names+=(critic)
echo "[monitor] started critic (pid $!)"
MASTER_ADDR="${group_host_3}" MASTER_PORT="$((MASTER_PORT + 3))" srun --kill-on-bad-exit=1 --het-group=3 "${NEMO_LAUNCHER_PYTHON:-python3}" -u -m nemo_launcher.jobs.gpt.rlhf_ppo_actor --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml >>"${log_stem}_actor.out" 2>>"${log_stem}_actor.err" &
group_pids+=("$!")
group_names+=(actor)
echo "[monitor] started actor (pid $!)"

first_name=''
first_status=0
while [[ -z "${first_name}" ]]; do
  for index in "${!group_pids[@]}"; do
    if ! kill -0 "${group_pids[index]}" 2>/dev/null; then
      wait "${group_pids[index]}" || first_status=$?
      first_name="${group_names[index]}"
      break
    fi
  done
  [[ -n "${first_name}" ]] || sleep 1
done
echo "[monitor] ${first_name} ended with status ${first_status}; the other groups get 60 s to end"
if [[ "${first_name}" != actor && "${first_status}" == 0 ]]; then
  deadline=$((SECONDS + 60))
  while kill -0 "${group_pids[3]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 1; done
  if kill -0 "${group_pids[3]}" 2>/dev/null; then
    echo "[monitor] ${first_name} ended while actor still ran: the job fails"
    first_status=1
  else
    wait "${group_pids[3]}" || first_status=$?
    first_name=actor
    echo "[monitor] actor ended with status ${first_status}"
  fi
fi

alive() {
  local pid
  for pid in "${group_pids[@]}"; do
    if kill -0 "${pid}" 2>/dev/null; then return 0; fi
  done
  return 1
}
deadline=$((SECONDS + 60))
while alive && ((SECONDS < deadline)); do sleep 1; done
for signal in TERM KILL; do
  for index in "${!group_pids[@]}"; do
    pid="${group_pids[index]}"
    if kill -0 "${pid}" 2>/dev/null; then
      echo "[monitor] sending SIG${signal} to ${group_names[index]}"
      kill -s "${signal}" "${pid}" 2>/dev/null || true
    fi
  done
  if [[ "${signal}" == TERM ]]; then deadline=$((SECONDS + 10)); fi
  while [[ "${signal}" == TERM ]] && alive && ((SECONDS < deadline)); do sleep 1; done
done
wait 2>/dev/null || true

# The job stopped before its last step (time limit, max_time) and saved a checkpoint: queue the next attempt.
if [[ -f <BRD>/rlhf_2b_actor_2b_critic/actor_results/RESUME_NEEDED ]]; then
  scontrol requeue "${SLURM_JOB_ID}"
fi
exit "${first_status}"
