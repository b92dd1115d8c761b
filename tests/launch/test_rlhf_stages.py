"""The RLHF stages at launch: the reference launcher's commands render as printed (rlhf_rm=gpt3/2b_rm,
rlhf_ppo=gpt3/2b_ppo, and our rlhf_dpo=gpt3/2b_dpo), PPO as one heterogeneous job of the seed's four roles (or the
reference's two), DPO as its reference job then its trainer; every consistency rule of the seed and every setting
that cannot run is refused with exit 2, one line, nothing written; Base Command Platform refuses the PPO job."""

import subprocess

import pytest

from .conftest import plan_rows

RM = ["stages=[rlhf_rm]", "rlhf_rm=gpt3/2b_rm"]
PPO = ["stages=[rlhf_ppo]", "rlhf_ppo=gpt3/2b_ppo"]
DPO = ["stages=[rlhf_dpo]", "rlhf_dpo=gpt3/2b_dpo"]


def _script(results, name: str) -> str:
    (script,) = results.rglob(f"*{name}_submission.sh")
    text = script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)
    return text


def test_the_reference_reward_model_command_renders(launch, tmp_path):
    code, out, err = launch(RM)
    assert code == 0, err
    text = _script(tmp_path / "results", "rlhf_rm_2b")
    assert "#SBATCH --nodes=8" in text and "#SBATCH --ntasks-per-node=8" in text
    assert "nemo_launcher.jobs.gpt.rlhf_rm" in text
    assert "#SBATCH --requeue" in text and "#SBATCH --signal=USR1@" in text


def test_the_reference_ppo_command_is_one_heterogeneous_job_of_four_roles(launch, tmp_path):
    code, out, err = launch(PPO)
    assert code == 0, err
    (row,) = plan_rows(out)
    text = _script(tmp_path / "results", row[1])
    assert text.count("#SBATCH hetjob") == 3
    programs = [f"nemo_launcher.jobs.gpt.rlhf_ppo_{role}" for role in ("reward_model", "initial_policy", "critic")]
    for index, program in enumerate([*programs, "nemo_launcher.jobs.gpt.rlhf_ppo_actor"]):
        line = next(line for line in text.splitlines() if f" --het-group={index} " in line)
        assert program in line, line
    assert "reward_model 1x8, initial_policy 1x8, critic 1x8, actor 1x8" in out
    # The actor's requeue marker: a stopped actor gets its job queued again.
    assert "actor_results/" in text.split("scontrol requeue")[0].rsplit("if [[ -f", 1)[1]


def test_the_reference_two_role_layout(launch, tmp_path):
    code, out, err = launch(
        PPO
        + [
            "rlhf_ppo.critic.trainer.ppo.combine_rm_and_critic_server=true",
            "rlhf_ppo.actor.remote_critic_rm.combine_rm_and_critic_server=true",
            "rlhf_ppo.initial_policy.serve=false",
        ]
    )
    assert code == 0, err
    (row,) = plan_rows(out)
    text = _script(tmp_path / "results", row[1])
    assert text.count("#SBATCH hetjob") == 1
    assert "critic 1x8, actor 1x8" in out and "reward_model" not in out


def test_dpo_runs_its_reference_job_first(launch, tmp_path):
    code, out, err = launch(DPO)
    assert code == 0, err
    rows = plan_rows(out)
    assert rows[0][1].endswith("_reference")
    assert rows[1][3].startswith("afterok:")
    results = tmp_path / "results"
    reference = _script(results, rows[0][1])
    assert "nemo_launcher.jobs.gpt.rlhf_dpo_reference" in reference
    assert "nemo_launcher.jobs.gpt.rlhf_dpo " in _script(results, rows[1][1])


# (base, overrides, words the one-line message must contain): the seed's consistency rules first.
CASES = [
    (
        PPO,
        ["rlhf_ppo.critic.exp_manager.checkpoint_callback_params.every_n_train_steps=3"],
        ["every_n_train_steps=3", "actor.trainer.ppo.val_check_interval(10) x actor.model.global_batch_size(64)"],
    ),
    (
        PPO,
        ["rlhf_ppo.critic.trainer.ppo.inference_micro_batch_size=3"],
        ["inference_micro_batch_size=3", "ceil(actor.model.ppo.rollout_micro_batch_size(8) / critic"],
    ),
    (
        PPO,
        ["rlhf_ppo.reward_model.model.inference_micro_batch_size=5"],
        ["reward_model.model.inference_micro_batch_size=5", "reward_model data-parallel size(8)) = 1"],
    ),
    (
        PPO,
        ["rlhf_ppo.initial_policy.model.inference_micro_batch_size=7"],
        ["initial_policy.model.inference_micro_batch_size=7", "= 1"],
    ),
    (PPO, ["rlhf_ppo.critic.model.ppo_epochs=3"], ["critic.model.ppo_epochs=3", "actor.model.ppo.epochs(1)"]),
    (
        PPO,
        ["rlhf_ppo.actor.remote_critic_rm.combine_rm_and_critic_server=true"],
        ["combine_rm_and_critic_server=True", "critic.trainer.ppo.combine_rm_and_critic_server(False)"],
    ),
    (PPO, ["rlhf_ppo.actor.remote_critic_rm.critic.port=5555"], ["critic.port=5555", "critic.trainer.ppo.port(5557)"]),
    (PPO, ["rlhf_ppo.actor.model.ppo.num_rollout_samples=500"], ["num_rollout_samples=500", "multiple of"]),
    (PPO, ["rlhf_ppo.actor.trainer.ppo.gae_lambda=1.5"], ["gae_lambda=1.5", "[0, 1]"]),
    (PPO, ["rlhf_ppo.actor.model.ppo.ratio_eps=0"], ["ratio_eps=0.0", "> 0"]),
    (PPO, ["rlhf_ppo.actor.model.pipeline_model_parallel_size=2"], ["pipeline_model_parallel_size=2", "set 1"]),
    (PPO, ["cluster_type=bcp"], ["cluster_type='bcp'", "heterogeneous", "cluster_type=bcm"]),
]


@pytest.mark.parametrize("base, overrides, words", CASES, ids=[" ".join(case[1]) for case in CASES])
def test_what_cannot_run_is_refused_at_launch(base, overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(base + overrides, debug=False, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"
