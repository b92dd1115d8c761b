"""A whole rlhf_ppo job for the actor's tests: the roles of one resolved section started as local processes (as the
interactive backend starts them), the actor among them, and what the actor wrote read back.

    job = PpoJob(section, work)          # writes <work>/rlhf_ppo.yaml
    job.start_servers()                  # each server role present in the section, on its port
    rc = job.run_actor()                 # the actor in the foreground; its output in <work>/actor.log
    job.stop()                           # any role still running is killed (the launcher's monitor does this)
    metrics(section)                     # ppo_metrics.jsonl, one record per step (0: the validation before step 1)
"""

import json
import subprocess
import time
from pathlib import Path

import yaml

from ..gpt_train_support import REPO, command, environment

MODULES = {
    "reward_model": "nemo_launcher.jobs.gpt.rlhf_ppo_reward_model",
    "initial_policy": "nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy",
    "critic": "nemo_launcher.jobs.gpt.rlhf_ppo_critic",
    "actor": "nemo_launcher.jobs.gpt.rlhf_ppo_actor",
}
# What differs between two runs of the same job besides the numbers that must not: wall time.
TIMINGS = ("step_time_s",)


class PpoJob:
    def __init__(self, section: dict, work: Path):
        self.section, self.work = section, Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.config = self.work / "rlhf_ppo.yaml"
        self.config.write_text(yaml.safe_dump(section))
        self.processes: dict[str, subprocess.Popen] = {}
        self.attempt = 0

    def server_roles(self) -> list[str]:
        roles = ["critic"]
        if not self.section["critic"]["trainer"]["ppo"]["combine_rm_and_critic_server"]:
            roles.insert(0, "reward_model")
        if self.section["initial_policy"]["serve"]:
            roles.insert(-1, "initial_policy")
        return roles

    def log(self, role: str) -> Path:
        return self.work / f"{role}.{self.attempt}.log"

    def start(self, role: str) -> subprocess.Popen:
        # Not the warm interpreter: a killed role must be gone at once, its port free for the rerun.
        process = subprocess.Popen(
            command(self.config, program=(MODULES[role],), warm=False),
            cwd=REPO,
            env=environment(),
            stdout=open(self.log(role), "w"),
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.processes[role] = process
        return process

    def start_servers(self) -> None:
        self.attempt += 1
        for role in self.server_roles():
            self.start(role)

    def run_actor(self, timeout_s: float = 400) -> int:
        process = self.start("actor")
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"the actor ran over {timeout_s} s:\n{self.text('actor')}") from None

    def text(self, role: str) -> str:
        return self.log(role).read_text()

    def wait_servers_exit(self, timeout_s: float = 60) -> dict[str, int | None]:
        """Each server's exit status once the actor's /shutdown ended it (None: still running after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        codes = {}
        for role in self.server_roles():
            try:
                codes[role] = self.processes[role].wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[role] = None
        return codes

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def actor_dir(section: dict) -> Path:
    return Path(section["actor"]["exp_manager"]["explicit_log_dir"])


def metrics(section: dict) -> list[dict]:
    lines = (actor_dir(section) / "ppo_metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]


def policy_nemo(section: dict) -> Path:
    return actor_dir(section) / "checkpoints" / f"{section['actor']['exp_manager']['name']}.nemo"


def critic_nemo(section: dict) -> Path:
    exp = section["critic"]["exp_manager"]
    return Path(exp["explicit_log_dir"]) / "checkpoints" / f"{exp['name']}.nemo"


def set_keys(section: dict, values: dict) -> dict:
    """Sets dotted keys in place: set_keys(s, {"actor.model.optim.lr": 1e-3}); returns the section."""
    for dotted, value in values.items():
        node = section
        *parents, last = dotted.split(".")
        for name in parents:
            node = node[name]
        node[last] = value
    return section
