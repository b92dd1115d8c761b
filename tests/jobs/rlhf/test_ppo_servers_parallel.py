"""PPO server roles of two processes (torchrun): every request reaches both ranks, data-parallel ranks split the rows
and tensor-parallel ranks compute them together, and the answers and the critic's training equal one process's.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_ppo_servers_parallel.py -q
"""

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from nemo_launcher.jobs.rlhf.remote import RoleClient, RoleError

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..gpt_train_support import REPO, command, environment
from ..rlhf_support import preference_dir, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..server_ports import server_ports
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)
from .ppo_servers_support import ROWS, ppo_section

MODULES = {
    "reward_model": "nemo_launcher.jobs.gpt.rlhf_ppo_reward_model",
    "initial_policy": "nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy",
    "critic": "nemo_launcher.jobs.gpt.rlhf_ppo_critic",
}


def _variant(base: dict, work, name: str, role: str, devices: int, tp: int) -> dict:
    """`base` with `role` on `devices` processes at TP `tp` (its inference micro-batch by the seed's rule), its own
    port and log directory."""
    section = copy.deepcopy(base)
    (port,) = server_ports(1)
    part = section[role]
    part["trainer"]["devices"] = devices
    part["model"]["tensor_model_parallel_size"] = tp
    rollout = section["actor"]["model"]["ppo"]["rollout_micro_batch_size"]
    inference = -(-rollout // (devices // tp))
    if role == "critic":
        part["trainer"]["ppo"].update(port=port, inference_micro_batch_size=inference)
        section["actor"]["remote_critic_rm"]["critic"]["port"] = port
        part["exp_manager"]["explicit_log_dir"] = str(work / name / "critic_results")
    else:
        part["port"] = port
        part["model"]["inference_micro_batch_size"] = inference
        section["actor"]["remote_critic_rm"][role]["port"] = port
    return section


class Started:
    def __init__(self, work, name: str, role: str, section: dict, processes: int):
        self.name, self.role, self.work = name, role, work
        config = work / f"{name}.yaml"
        config.write_text(yaml.safe_dump(section))
        port = section["critic"]["trainer"]["ppo"]["port"] if role == "critic" else section[role]["port"]
        self.client = RoleClient(name, "127.0.0.1", port, timeout_s=300)
        self.process = subprocess.Popen(
            command(config, processes=processes, program=(MODULES[role],)),
            cwd=REPO,
            env=environment(),
            stdout=open(work / f"{name}.log", "w"),
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return (self.work / f"{self.name}.log").read_text()[-5000:]

    def ready(self) -> None:
        try:
            self.client.wait_ready(deadline_s=400)
        except RoleError:
            raise AssertionError(self.log()) from None

    def stop(self) -> int:
        if self.process.poll() is None:
            try:
                self.client.call("shutdown", {})
            except RoleError:
                self.process.kill()
        return self.process.wait(timeout=180)


class _Roles(dict):
    """The started roles by name, and the .nemo they serve."""

    def __init__(self, roles: dict, nemo: str):
        super().__init__(roles)
        self.nemo = nemo


@pytest.fixture(scope="module")
def started(tmp_path_factory, rlhf_sft_nemo, preference_dir):  # noqa: F811
    work = tmp_path_factory.mktemp("ppo_parallel")
    base = ppo_section(rlhf_sft_nemo, preference_dir, work, server_ports(3))
    base["critic"]["model"]["optim"]["lr"] = 1e-3
    layouts = {
        "critic_tp1": ("critic", 1, 1),
        "critic_dp2": ("critic", 2, 1),
        "critic_tp2": ("critic", 2, 2),
        "policy_dp2": ("initial_policy", 2, 1),
        "reward_tp2": ("reward_model", 2, 2),
    }
    roles = {}
    for name, (role, devices, tp) in layouts.items():
        roles[name] = Started(work, name, role, _variant(base, work, name, role, devices, tp), devices)
    for role in roles.values():
        role.ready()
    yield _Roles(roles, rlhf_sft_nemo)
    codes = {name: role.stop() for name, role in roles.items()}
    assert set(codes.values()) == {0}, {name: roles[name].log() for name, code in codes.items() if code}


def _close(a, b, tolerance: float) -> bool:
    flat_a = [x for row in a for x in (row if isinstance(row, list) else [row])]
    flat_b = [x for row in b for x in (row if isinstance(row, list) else [row])]
    return len(flat_a) == len(flat_b) and all(abs(x - y) <= tolerance for x, y in zip(flat_a, flat_b, strict=True))


def test_two_process_servers_answer_as_one(started):
    values = {
        name: started[name].client.call("values", {"tokens": ROWS})["values"] for name in started if "critic" in name
    }
    assert _close(values["critic_dp2"], values["critic_tp1"], 1e-6)
    assert _close(values["critic_tp2"], values["critic_tp1"], 1e-5)
    # The servers hold the same .nemo: the reward model's last-token scalar is the untrained critic's there.
    rewards = started["reward_tp2"].client.call("rewards", {"tokens": ROWS})["rewards"]
    assert _close(rewards, [row[-1] for row in values["critic_tp1"]], 1e-5)
    logprobs = started["policy_dp2"].client.call("logprobs", {"tokens": ROWS})["logprobs"]
    assert _close(logprobs, _local_logprobs(started.nemo), 1e-5)


def _local_logprobs(nemo: str) -> list[list[float]]:
    """Each row's next-token log-probabilities from the GPT loaded here, one row at a time."""
    import torch

    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    policy, _ = load_gpt_from_nemo(nemo, 1, 1, "fp32")
    out = []
    for row in ROWS:
        with torch.no_grad():
            logits = policy(torch.tensor([row]), torch.arange(len(row)).unsqueeze(0), None)[0, :-1]
        out.append(torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(row[1:])[:, None])[:, 0].tolist())
    return out


def _payload(step: int) -> dict:
    starts = [max(1, len(row) // 2) for row in ROWS]
    return {
        "tokens": ROWS,
        "response_start": starts,
        "returns": [[(-1.0) ** i * 0.5] * (len(row) - s) for i, (row, s) in enumerate(zip(ROWS, starts, strict=True))],
        "old_values": [[0.0] * (len(row) - s) for row, s in zip(ROWS, starts, strict=True)],
        "step": step,
    }


def test_the_critic_trains_alike_on_one_two_data_parallel_and_two_tensor_parallel_processes(started):
    critics = ("critic_tp1", "critic_dp2", "critic_tp2")
    answers = {name: [] for name in critics}
    for step in (1, 2, 3):
        for name in critics:
            answers[name].append(started[name].client.call("train", _payload(step)))
    losses = {name: [a["loss"] for a in got] for name, got in answers.items()}
    norms = {name: [a["grad_norm"] for a in got] for name, got in answers.items()}
    print("critic losses", losses, "grad norms", norms)  # shown with -s
    assert losses["critic_tp1"][-1] < losses["critic_tp1"][0]
    assert _close(losses["critic_dp2"], losses["critic_tp1"], 1e-6), losses
    assert _close(norms["critic_dp2"], norms["critic_tp1"], 1e-5), norms
    # Tensor parallelism sums in another order; the gradient norm (and so the clipping) counts every shard once.
    assert _close(losses["critic_tp2"], losses["critic_tp1"], 1e-6), losses
    assert _close(norms["critic_tp2"], norms["critic_tp1"], 1e-5 * max(norms["critic_tp1"])), norms
    values = {name: started[name].client.call("values", {"tokens": ROWS})["values"] for name in critics}
    assert _close(values["critic_dp2"], values["critic_tp1"], 1e-6)
    assert _close(values["critic_tp2"], values["critic_tp1"], 1e-5)
    # Both tensor-parallel ranks save their shard; /load restores them.
    saved = started["critic_tp2"].client.call("save", {"step": 3})["saved"]
    assert sorted(p.name for p in Path(saved).iterdir()) == ["COMPLETE", "rank_0.pt", "rank_1.pt"]
    after_save = started["critic_tp2"].client.call("train", _payload(4))["loss"]
    started["critic_tp2"].client.call("load", {"step": 3})
    assert started["critic_tp2"].client.call("train", _payload(4))["loss"] == after_save
