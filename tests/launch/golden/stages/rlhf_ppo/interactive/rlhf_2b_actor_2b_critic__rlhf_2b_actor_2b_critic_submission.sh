#!/bin/bash
# Written by nemo_launcher (rlhf_ppo stage). Runs on this machine: bash <this file>
set -euo pipefail

export TRANSFORMERS_OFFLINE=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NEMO_LAUNCHER_NUMA_MAPPING='{"balanced":true,"cores":"all_logical","enable":true,"max_cores":8,"min_cores":1,"mode":"unique_contiguous","scope":"node"}'
export PYTHONPATH=/opt/launcher"${PYTHONPATH:+:${PYTHONPATH}}"
NEMO_RLHF_REWARD_MODEL_HOST=localhost
export NEMO_RLHF_REWARD_MODEL_HOST
NEMO_RLHF_INITIAL_POLICY_HOST=localhost
export NEMO_RLHF_INITIAL_POLICY_HOST
NEMO_RLHF_CRITIC_HOST=localhost
export NEMO_RLHF_CRITIC_HOST

# One log per group and run: a rerun never overwrites an earlier log.
log_stem=<BRD>/rlhf_2b_actor_2b_critic/log-rlhf_2b_actor_2b_critic_"$(date +%Y%m%d_%H%M%S)_$$"

# The job's groups, started together; the first to end ends the job with its exit status.
group_names=()
group_pids=()
setsid "${NEMO_LAUNCHER_PYTHON:-python3}" -m torch.distributed.run --standalone --nproc_per_node=8 -m nemo_launcher.jobs.gpt.rlhf_ppo_reward_model --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml > >(tee -a "${log_stem}_reward_model.out" | sed -u 's/^/[reward_model] /') 2>&1 &
group_pids+=("$!")
group_names+=(reward_model)
echo "[monitor] started reward_model (pid $!)"
setsid "${NEMO_LAUNCHER_PYTHON:-python3}" -m torch.distributed.run --standalone --nproc_per_node=8 -m nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml > >(tee -a "${log_stem}_initial_policy.out" | sed -u 's/^/[initial_policy] /') 2>&1 &
group_pids+=("$!")
group_names+=(initial_policy)
echo "[monitor] started initial_policy (pid $!)"
setsid "${NEMO_LAUNCHER_PYTHON:-python3}" -m torch.distributed.run --standalone --nproc_per_node=8 -m nemo_launcher.jobs.gpt.rlhf_ppo_critic --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml > >(tee -a "${log_stem}_critic.out" | sed -u 's/^/[critic] /') 2>&1 &
group_pids+=("$!")
group_names+=(critic)
echo "[monitor] started critic (pid $!)"
setsid "${NEMO_LAUNCHER_PYTHON:-python3}" -m torch.distributed.run --standalone --nproc_per_node=8 -m nemo_launcher.jobs.gpt.rlhf_ppo_actor --config <BRD>/rlhf_2b_actor_2b_critic/rlhf_2b_actor_2b_critic_hydra.yaml > >(tee -a "${log_stem}_actor.out" | sed -u 's/^/[actor] /') 2>&1 &
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
    if kill -0 -- -"${pid}" 2>/dev/null; then return 0; fi
  done
  return 1
}
deadline=$((SECONDS + 60))
while alive && ((SECONDS < deadline)); do sleep 1; done
for signal in TERM KILL; do
  for index in "${!group_pids[@]}"; do
    pid="${group_pids[index]}"
    if kill -0 -- -"${pid}" 2>/dev/null; then
      echo "[monitor] sending SIG${signal} to ${group_names[index]}"
      kill -s "${signal}" -- -"${pid}" 2>/dev/null || true
    fi
  done
  if [[ "${signal}" == TERM ]]; then deadline=$((SECONDS + 10)); fi
  while [[ "${signal}" == TERM ]] && alive && ((SECONDS < deadline)); do sleep 1; done
done
wait 2>/dev/null || true
exit "${first_status}"
