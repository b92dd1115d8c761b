"""`rlhf_ppo=gpt3/tiny` on the real (local) Slurm as the launcher submits it: one heterogeneous job whose four
components land on four nodes, each role's program finding the servers at the first host of their groups; the actor
finishes its PPO steps, shuts the servers down, and the job completes with the policy written. Learning is the job
tests' subject (tests/jobs/rlhf/): here the policy is the random tiny GPT and the reward model and critic give it a
fresh head, so no training runs before the job."""

import json
import subprocess

from tests.jobs.data_support import tiny_bpe_files  # noqa: F401  (fixture)
from tests.jobs.rlhf_support import write_tiny_preferences
from tests.jobs.server_ports import server_ports
from tests.jobs.sft_support import tiny_nemo  # noqa: F401  (fixture)

from .conftest import plan_rows
from .test_training_on_slurm import SLURM_CPU


def test_ppo_runs_as_four_hetjob_components(slurm_cluster, tmp_path, launch, tiny_nemo, tiny_bpe_files):  # noqa: F811
    data = tmp_path / "data"
    write_tiny_preferences(data / "rlhf" / "tiny_preferences", *tiny_bpe_files)
    results = tmp_path / "results"
    reward, initial, critic = server_ports(3)
    code, out, err = launch(
        [
            "stages=[rlhf_ppo]",
            "rlhf_ppo=gpt3/tiny",
            f"data_dir={data}",
            f"rlhf_ppo.actor.pretrained_checkpoint.restore_from_path={tiny_nemo}",
            f"rlhf_ppo.reward_model.model.restore_from_path={tiny_nemo}",
            f"rlhf_ppo.reward_model.port={reward}",
            f"rlhf_ppo.initial_policy.port={initial}",
            f"rlhf_ppo.critic.trainer.ppo.port={critic}",
            "rlhf_ppo.actor.trainer.ppo.max_steps=2",
            "rlhf_ppo.run.monitor_grace_s=5",
            *SLURM_CPU,
        ],
        debug=False,
        results=results,
    )
    assert code == 0, err
    (row,) = plan_rows(out)
    job_id = row[2]
    state = slurm_cluster.wait(job_id, timeout_s=300)
    job_dir = results / "rlhf_ppo_tiny"
    logs = {path.name: path.read_text() for path in job_dir.glob("log-*")}
    assert state == "COMPLETED", {name: text[-2000:] for name, text in logs.items()}
    monitor = next(text for name, text in logs.items() if name.endswith(f"_{job_id}.out"))
    assert "[monitor] actor ended with status 0" in monitor, monitor  # itself, or after the servers it shut down

    # Four components, one node each, and the actor found every server at its group's first host.
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    nodes = sorted(word.split("=", 1)[1] for word in shown.split() if word.startswith("NodeList="))
    assert len(nodes) == 4 and len(set(nodes)) == 4, shown
    actor = next(text for name, text in logs.items() if name.endswith("_actor.out"))
    assert "every role ready" in actor, actor[-3000:]
    for name in ("reward_model", "initial_policy", "critic"):
        server = next(text for log, text in logs.items() if log.endswith(f"_{name}.out"))
        assert "ready" in server, (name, server[-2000:])
    policy = job_dir / "actor_results" / "checkpoints" / "megatron_gpt_ppo_actor.nemo"
    assert policy.is_file(), actor[-3000:]
    steps = [json.loads(line) for line in (job_dir / "actor_results" / "ppo_metrics.jsonl").read_text().splitlines()]
    assert [step["step"] for step in steps if "reward" in step][-1] == 2, steps
