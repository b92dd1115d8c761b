"""The PPO server programs (jobs/gpt/rlhf_ppo_{reward_model,initial_policy,critic}.py) started as the launcher starts
them, on free ports, answering the protocol for real: rewards, log-probs and values equal to the tiny model's own
computed here row by row, bad requests refused with the role's name, the critic's /train lowering its loss on a fixed
batch, /save then /load repeating a training step exactly, the critic's .nemo written, and /shutdown ending each role
with exit 0. The tests share one set of started roles (module fixture) and run in file order (the suite never
reorders a module's tests): the shutdown test comes after every test that calls the roles.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_ppo_servers.py -q
"""

import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from nemo_launcher.jobs.rlhf.remote import RoleClient, RoleError

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..gpt_train_support import REPO, command, environment
from ..rlhf_support import preference_dir, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..server_ports import server_ports
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)
from .ppo_servers_support import ROWS, ppo_section

PROGRAMS = {
    "reward_model": "nemo_launcher.jobs.gpt.rlhf_ppo_reward_model",
    "initial_policy": "nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy",
    "critic": "nemo_launcher.jobs.gpt.rlhf_ppo_critic",
}


class Roles:
    """The three servers of one config, started together; their clients and processes."""

    def __init__(self, section: dict, work: Path):
        self.config = work / "rlhf_ppo.yaml"
        self.config.write_text(yaml.safe_dump(section))
        self.section, self.work = section, work
        self.processes, self.clients = {}, {}
        ports = {
            "reward_model": section["reward_model"]["port"],
            "initial_policy": section["initial_policy"]["port"],
            "critic": section["critic"]["trainer"]["ppo"]["port"],
        }
        for role, module in PROGRAMS.items():
            log = open(work / f"{role}.log", "w")
            self.processes[role] = subprocess.Popen(
                command(self.config, program=(module,)),
                cwd=REPO,
                env=environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            self.clients[role] = RoleClient(role, "127.0.0.1", ports[role], timeout_s=240)
        for role, client in self.clients.items():
            try:
                client.wait_ready(deadline_s=300)
            except RoleError:
                raise AssertionError(self.log(role)) from None

    def log(self, role: str) -> str:
        return (self.work / f"{role}.log").read_text()[-4000:]

    def close(self) -> None:
        for role, process in self.processes.items():
            if process.poll() is None:
                try:
                    self.clients[role].call("shutdown", {})
                    process.wait(timeout=120)
                except (RoleError, subprocess.TimeoutExpired):
                    process.kill()
                    process.wait()


@pytest.fixture(scope="module")
def roles(tmp_path_factory, rlhf_sft_nemo, preference_dir):  # noqa: F811
    work = tmp_path_factory.mktemp("ppo_servers")
    section = ppo_section(rlhf_sft_nemo, preference_dir, work, server_ports(3))
    section["critic"]["model"]["optim"]["lr"] = 1e-3  # a few /train calls must visibly fit the fixed batch
    started = Roles(section, work)
    yield started
    started.close()


@pytest.fixture(scope="module")
def local_models(rlhf_sft_nemo):  # noqa: F811
    """The same .nemo loaded here: the scalar-head model (the fresh head is seeded, so the servers' equals it) and
    the GPT."""
    from nemo_launcher.jobs.gpt.converter import GPT
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo
    from nemo_launcher.jobs.rlhf.reward_model import load_scalar_model

    scalar, _, _ = load_scalar_model(GPT, rlhf_sft_nemo, tp=1, precision="fp32", on_gpu=False)
    policy, _ = load_gpt_from_nemo(rlhf_sft_nemo, 1, 1, "fp32")
    return scalar, policy


def _alone(model, row):
    tokens = torch.tensor([row])
    positions = torch.arange(len(row)).unsqueeze(0)
    with torch.no_grad():
        return model(tokens, positions, None)[0]  # [len, vocab] or [len, 1]


def test_servers_answer_what_the_model_computes_row_by_row(roles, local_models):
    scalar, policy = local_models
    health = roles.clients["reward_model"].wait_ready(1)
    assert (health["role"], health["vocab_size"]) == ("reward_model", 2048)
    rewards = roles.clients["reward_model"].call("rewards", {"tokens": ROWS})["rewards"]
    logprobs = roles.clients["initial_policy"].call("logprobs", {"tokens": ROWS})["logprobs"]
    values = roles.clients["critic"].call("values", {"tokens": ROWS})["values"]
    assert [len(v) for v in values] == [len(row) for row in ROWS]
    assert [len(lp) for lp in logprobs] == [len(row) - 1 for row in ROWS]
    for i, row in enumerate(ROWS):
        head = _alone(scalar, row)[:, 0]
        torch.testing.assert_close(torch.tensor(rewards[i]), head[-1], rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.tensor(values[i]), head, rtol=0, atol=1e-5)  # untrained critic = the RM
        expected = torch.log_softmax(_alone(policy, row)[:-1].float(), dim=-1).gather(1, torch.tensor(row[1:])[:, None])
        torch.testing.assert_close(torch.tensor(logprobs[i]), expected[:, 0], rtol=0, atol=1e-5)


def test_a_bad_request_is_refused_with_the_role_and_the_reason(roles):
    with pytest.raises(RoleError, match=r"reward_model role at .* \(HTTP 400\): tokens\[1\] holds an id outside"):
        roles.clients["reward_model"].call("rewards", {"tokens": [[1, 2], [3, 99999]]})
    with pytest.raises(RoleError, match=r"initial_policy role .* has no /values \(it serves /logprobs, /shutdown\)"):
        roles.clients["initial_policy"].call("values", {"tokens": [[1, 2]]})
    with pytest.raises(RoleError, match=r"critic role .* returns\[0\] must hold 2 numbers, one per generated token"):
        roles.clients["critic"].call(
            "train",
            {"tokens": [[1, 2, 3]], "response_start": [1], "returns": [[1.0]], "old_values": [[0.0]], "step": 1},
        )
    with pytest.raises(RoleError, match=r"no complete critic state for actor step 77"):
        roles.clients["critic"].call("load", {"step": 77})


def _train_payload(critic: RoleClient, step: int, target: float = 1.0) -> dict:
    """A fixed batch: responses start after each row's first half; every generated token's return is `target`."""
    values = critic.call("values", {"tokens": ROWS})["values"]
    starts = [max(1, len(row) // 2) for row in ROWS]
    return {
        "tokens": ROWS,
        "response_start": starts,
        "returns": [[target] * (len(row) - start) for row, start in zip(ROWS, starts, strict=True)],
        "old_values": [v[start - 1 : len(row) - 1] for v, row, start in zip(values, ROWS, starts, strict=True)],
        "step": step,
    }


def _value_loss(critic: RoleClient, payload: dict) -> float:
    """0.5 x the mean squared error of the served values against the payload's returns (computed here)."""
    values = critic.call("values", {"tokens": ROWS})["values"]
    errors = [
        (v - r) ** 2
        for row_values, start, returns in zip(values, payload["response_start"], payload["returns"], strict=True)
        for v, r in zip(row_values[start - 1 :], returns, strict=False)
    ]
    return 0.5 * sum(errors) / len(errors)


def test_critic_save_then_load_repeats_a_training_step_exactly(roles):
    critic = roles.clients["critic"]
    first = critic.call("train", _train_payload(critic, 1))
    assert first["optimizer_steps"] == 2  # 8 rows, global batch 4, one pass
    assert Path(first["nemo"]).is_file()  # every_n_train_steps = 2 critic steps
    saved = critic.call("save", {"step": 1})["saved"]
    assert (Path(saved) / "COMPLETE").is_file() and (Path(saved) / "rank_0.pt").is_file()
    payload = _train_payload(critic, 2)
    second = critic.call("train", payload)
    after = critic.call("values", {"tokens": ROWS})["values"]
    assert critic.call("load", {"step": 1}) == {"loaded": saved}
    again = critic.call("train", payload)
    assert again["loss"] == second["loss"] and again["grad_norm"] == second["grad_norm"]
    assert critic.call("values", {"tokens": ROWS})["values"] == after


def test_critic_train_lowers_its_loss_on_a_fixed_batch(roles):
    critic = roles.clients["critic"]
    before = _value_loss(critic, _train_payload(critic, 10, target=-1.0))
    reported = [critic.call("train", _train_payload(critic, step, target=-1.0))["loss"] for step in range(10, 15)]
    after = _value_loss(critic, _train_payload(critic, 15, target=-1.0))
    print("critic value loss on the fixed batch", before, "->", after, "reported", reported)  # shown with -s
    assert after < 0.25 * before and reported[-1] < reported[0], (before, after, reported)


def test_shutdown_writes_the_critic_and_every_role_exits_0(roles):
    from nemo_launcher.jobs.gpt.converter import GPT
    from nemo_launcher.jobs.rlhf.reward_model import load_scalar_model, scores

    values = roles.clients["critic"].call("values", {"tokens": ROWS[:1]})["values"][0]
    answers = {role: client.call("shutdown", {}) for role, client in roles.clients.items()}
    codes = {role: process.wait(timeout=120) for role, process in roles.processes.items()}
    assert codes == {"reward_model": 0, "initial_policy": 0, "critic": 0}, {r: roles.log(r) for r in codes}
    nemo = answers["critic"]["saved"]
    assert nemo == str(
        Path(roles.section["critic"]["exp_manager"]["explicit_log_dir"]) / "checkpoints/megatron_gpt_critic.nemo"
    )
    model, _, _ = load_scalar_model(GPT, nemo, tp=1, precision="fp32", on_gpu=False)
    with torch.no_grad():
        reloaded = scores(model, torch.tensor(ROWS[:1]), torch.tensor([len(ROWS[0])]))[0]
    torch.testing.assert_close(reloaded, torch.tensor(values), rtol=0, atol=1e-5)
    assert "critic: ready" in roles.log("critic")


def test_a_role_the_layout_does_not_start_is_refused(tmp_path, rlhf_sft_nemo, preference_dir):  # noqa: F811
    section = ppo_section(rlhf_sft_nemo, preference_dir, tmp_path, server_ports(3))
    section["critic"]["trainer"]["ppo"]["combine_rm_and_critic_server"] = True
    section["actor"]["remote_critic_rm"]["combine_rm_and_critic_server"] = True
    config = tmp_path / "rlhf_ppo.yaml"
    config.write_text(yaml.safe_dump(section))
    result = subprocess.run(
        command(config, program=(PROGRAMS["reward_model"],)),
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        "Error: the reward_model role is not part of this layout (critic.trainer.ppo.combine_rm_and_critic_server"
        in (result.stderr)
    )


def test_a_port_in_use_stops_the_role_naming_its_key(tmp_path, rlhf_sft_nemo, preference_dir):  # noqa: F811
    import socket

    ports = server_ports(3)
    section = ppo_section(rlhf_sft_nemo, preference_dir, tmp_path, ports)
    config = tmp_path / "rlhf_ppo.yaml"
    config.write_text(yaml.safe_dump(section))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", ports[1]))
        taken.listen()
        result = subprocess.run(
            command(config, program=(PROGRAMS["initial_policy"],)),
            cwd=REPO,
            env=environment(),
            capture_output=True,
            text=True,
        )
    assert result.returncode == 1, result.stderr[-3000:]
    assert (
        f"Error: rlhf_ppo.initial_policy.port={ports[1]}: the initial_policy role cannot listen there" in result.stderr
    )


def test_a_combined_critic_also_serves_the_rewards(tmp_path, rlhf_sft_nemo, preference_dir, local_models):  # noqa: F811
    """The reference's two-role layout: the critic answers /rewards from its own frozen copy of the reward model, which
    training the critic leaves unchanged, standardized as reward_standardization says."""
    scalar, _ = local_models
    ports = server_ports(3)
    section = ppo_section(rlhf_sft_nemo, preference_dir, tmp_path, ports)
    section["critic"]["trainer"]["ppo"]["combine_rm_and_critic_server"] = True
    section["actor"]["remote_critic_rm"]["combine_rm_and_critic_server"] = True
    section["reward_model"]["model"]["reward_standardization"] = {"enable": True, "mean": 0.5, "std": 2.0}
    config = tmp_path / "rlhf_ppo.yaml"
    config.write_text(yaml.safe_dump(section))
    process = subprocess.Popen(
        command(config, program=(PROGRAMS["critic"],)),
        cwd=REPO,
        env=environment(),
        stdout=open(tmp_path / "critic.log", "w"),
        stderr=subprocess.STDOUT,
    )
    critic = RoleClient("critic", "127.0.0.1", ports[2], timeout_s=240)
    try:
        critic.wait_ready(deadline_s=300)
        expected = [(float(_alone(scalar, row)[-1, 0]) - 0.5) / 2.0 for row in ROWS]  # standardized
        before = critic.call("rewards", {"tokens": ROWS})["rewards"]
        critic.call("train", _train_payload(critic, 1, target=3.0))
        after = critic.call("rewards", {"tokens": ROWS})["rewards"]
        values = critic.call("values", {"tokens": ROWS})["values"]
        assert max(abs(a - b) for a, b in zip(before, expected, strict=True)) < 1e-5
        assert after == before  # the reward model is frozen
        assert max(abs(v[-1] - (2.0 * r + 0.5)) for v, r in zip(values, before, strict=True)) > 1e-3  # it moved
        assert critic.call("shutdown", {})["ok"] is True
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "critic: serving rewards of" in (tmp_path / "critic.log").read_text()
