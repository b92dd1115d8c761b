"""The rlhf_ppo schema (contract/schemas/rlhf_ppo.py): the shipped configs bind, every consistency rule of the seed and
every setting that cannot run is refused with its key, its value and the fix, and the roles come out in het-group
order with what the launcher needs."""

import copy

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.rlhf_ppo import PpoConfig
from nemo_launcher.launch.resolvers import REPO_ROOT, register_resolvers

register_resolvers()


def composed(name: str, *overrides: str) -> dict:
    """The rlhf_ppo section as the launcher resolves it for `rlhf_ppo=gpt3/<name>`."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[f"rlhf_ppo=gpt3/{name}", "base_results_dir=/results", "data_dir=/data", *overrides],
        )
    return OmegaConf.to_container(cfg.rlhf_ppo, resolve=True)


@pytest.fixture(scope="module")
def tiny() -> dict:
    return composed("tiny")


def changed(section: dict, **values) -> dict:
    """A copy of `section` with dotted keys set: changed(s, **{"critic.model.ppo_epochs": 2})."""
    out = copy.deepcopy(section)
    for dotted, value in values.items():
        node = out
        *parents, last = dotted.split(".")
        for name in parents:
            node = node[name]
        node[last] = value
    return out


def refusal(section: dict) -> str:
    with pytest.raises(JobConfigError) as caught:
        PpoConfig.from_dict(section)
    return str(caught.value)


def test_the_shipped_configs_bind_with_the_seeds_roles():
    tiny = PpoConfig.from_dict(composed("tiny"))
    assert [(r.name, r.program_kind, r.nodes, r.devices, r.host_variable) for r in tiny.roles()] == [
        ("reward_model", "rlhf_ppo_reward_model", 1, 1, "NEMO_RLHF_REWARD_MODEL_HOST"),
        ("initial_policy", "rlhf_ppo_initial_policy", 1, 1, "NEMO_RLHF_INITIAL_POLICY_HOST"),
        ("critic", "rlhf_ppo_critic", 1, 1, "NEMO_RLHF_CRITIC_HOST"),
        ("actor", "rlhf_ppo_actor", 1, 1, None),
    ]
    big = PpoConfig.from_dict(composed("2b_ppo"))
    # The reference's values: critic TP4 on 8 GPUs (DP 2), rollout micro-batch 8 -> inference micro-batch 4.
    assert big.critic.trainer.ppo.inference_micro_batch_size == 4
    assert big.reward_model.model.inference_micro_batch_size == 1  # TP1 on 8 GPUs: DP 8
    assert big.critic.exp_manager.checkpoint_callback_params.every_n_train_steps == 10
    assert (big.actor.model.ppo.num_rollout_samples, big.actor.trainer.ppo.initial_policy_kl_penalty) == (512, 0.01)
    assert (big.actor.trainer.ppo.gae_lambda, big.actor.model.ppo.length_params.max_length) == (0.95, 1024)
    assert big.run.time_limit == "4-00:00:00" and big.run.monitor_grace_s == 60
    assert [(r.name, r.devices) for r in big.roles()][-1] == ("actor", 8)
    assert (big.critic.model.tensor_model_parallel_size, big.actor.model.tensor_model_parallel_size) == (4, 8)


def test_the_layout_options_drop_roles(tiny):
    combined = PpoConfig.from_dict(composed("tiny", "rlhf_ppo.critic.trainer.ppo.combine_rm_and_critic_server=true"))
    assert [r.name for r in combined.roles()] == ["initial_policy", "critic", "actor"]
    assert combined.actor.remote_critic_rm.combine_rm_and_critic_server  # the actor's flag interpolates the critic's
    local_reference = PpoConfig.from_dict(changed(tiny, **{"initial_policy.serve": False}))
    assert [r.name for r in local_reference.roles()] == ["reward_model", "critic", "actor"]
    assert "rlhf_ppo.initial_policy.model.restore_from_path" not in dict(local_reference.reads())


def test_reads_writes_and_the_actor_log_dir(tiny):
    cfg = PpoConfig.from_dict(tiny)
    sft, rm = (
        # Where fine_tuning and rlhf_rm write by default, after the default training run (gpt3/5b).
        "/results/gpt3_5b/sft/results/checkpoints/megatron_gpt_sft.nemo",
        "/results/rlhf_rm_gpt3_5b/results/checkpoints/megatron_gpt.nemo",
    )
    assert dict(cfg.reads()) == {
        "rlhf_ppo.actor.pretrained_checkpoint.restore_from_path": sft,
        "rlhf_ppo.critic.pretrained_checkpoint.restore_from_path": rm,
        "rlhf_ppo.reward_model.model.restore_from_path": rm,
        "rlhf_ppo.initial_policy.model.restore_from_path": sft,
        "rlhf_ppo.actor.model.data.data_prefix.train": "/data/rlhf/tiny_preferences/train_prompts.jsonl",
        "rlhf_ppo.actor.model.data.data_prefix.validation": "/data/rlhf/tiny_preferences/validation_prompts.jsonl",
    }
    assert cfg.writes() == ["/results/rlhf_ppo_tiny/actor_results", "/results/rlhf_ppo_tiny/critic_results"]
    assert cfg.actor_log_dir() == "/results/rlhf_ppo_tiny/actor_results"


def test_role_data_parallel_size_checks_the_processes_started(tiny):
    cfg = PpoConfig.from_dict(
        changed(tiny, **{"critic.trainer.devices": 2, "critic.trainer.ppo.inference_micro_batch_size": 2})
    )
    assert cfg.role_data_parallel_size("critic", 2) == 2
    with pytest.raises(JobConfigError, match=r"rlhf_ppo.critic.trainer.devices=2: .* but 1 processes were started"):
        cfg.role_data_parallel_size("critic", 1)


# (dotted changes, the message's start, a piece of its fix) for each rule.
RULES = [
    # the seed's rules
    (
        {"critic.exp_manager.checkpoint_callback_params.every_n_train_steps": 3},
        "rlhf_ppo.critic.exp_manager.checkpoint_callback_params.every_n_train_steps=3",
        "val_check_interval(2) x actor.model.global_batch_size(4) / critic.model.global_batch_size(4) = 2",
    ),
    (
        {
            "actor.trainer.ppo.val_check_interval": 1,
            "critic.model.global_batch_size": 8,
            "actor.model.ppo.num_rollout_samples": 8,
        },
        "rlhf_ppo.critic.exp_manager.checkpoint_callback_params.every_n_train_steps=2",
        "= 0.5, not an integer",
    ),
    (
        {"critic.trainer.ppo.inference_micro_batch_size": 3},
        "rlhf_ppo.critic.trainer.ppo.inference_micro_batch_size=3",
        "ceil(actor.model.ppo.rollout_micro_batch_size(4) / critic data-parallel size(1)) = 4",
    ),
    (
        {"reward_model.trainer.devices": 3},
        "rlhf_ppo.reward_model.model.inference_micro_batch_size=4",
        "ceil(actor.model.ppo.rollout_micro_batch_size(4) / reward_model data-parallel size(3)) = 2, where that size "
        "= trainer.devices(3) x trainer.num_nodes(1) / TP(1)",
    ),
    (
        {"initial_policy.model.inference_micro_batch_size": 1},
        "rlhf_ppo.initial_policy.model.inference_micro_batch_size=1",
        "initial_policy data-parallel size(1)) = 4",
    ),
    (
        {"critic.model.ppo_epochs": 2},
        "rlhf_ppo.critic.model.ppo_epochs=2",
        "must equal actor.model.ppo.epochs(1)",
    ),
    # the roles must find each other
    (
        {"actor.remote_critic_rm.combine_rm_and_critic_server": True},
        "rlhf_ppo.actor.remote_critic_rm.combine_rm_and_critic_server=True",
        "must match critic.trainer.ppo.combine_rm_and_critic_server(False)",
    ),
    (
        {"actor.remote_critic_rm.critic.port": 6000},
        "rlhf_ppo.actor.remote_critic_rm.critic.port=6000",
        "must equal critic.trainer.ppo.port(5557)",
    ),
    (
        {"actor.remote_critic_rm.reward_model.port": 6000},
        "rlhf_ppo.actor.remote_critic_rm.reward_model.port=6000",
        "must equal reward_model.port(5555)",
    ),
    (
        {"initial_policy.port": 5557},
        "rlhf_ppo.initial_policy.port=5557",
        "is also critic.trainer.ppo.port: roles may share a host",
    ),
    ({"reward_model.port": 80}, "rlhf_ppo.reward_model.port=80", "choose a port in [1024, 65535]"),
    # batch sizes divide
    (
        {"actor.model.ppo.num_rollout_samples": 6},
        "rlhf_ppo.actor.model.ppo.num_rollout_samples=6",
        "multiple of rollout_micro_batch_size(4) x actor data-parallel size(1) = 4",
    ),
    (
        {
            "actor.model.ppo.num_rollout_samples": 12,
            "critic.model.global_batch_size": 8,
            "critic.exp_manager.checkpoint_callback_params.every_n_train_steps": 1,
        },
        "rlhf_ppo.actor.model.ppo.num_rollout_samples=12",
        "multiple of critic.model.global_batch_size(8): each PPO step's rollouts make whole optimizer steps",
    ),
    (
        {"actor.model.global_batch_size": 3},
        "rlhf_ppo.actor.model.global_batch_size=3",
        "multiple of micro_batch_size(2) x data-parallel size(1) = 2",
    ),
    (
        {"critic.model.micro_batch_size": 3},
        "rlhf_ppo.critic.model.global_batch_size=4",
        "multiple of micro_batch_size(3)",
    ),
    (
        {"actor.model.ppo.num_val_samples": 6},
        "rlhf_ppo.actor.model.ppo.num_val_samples=6",
        "multiple of val_rollout_micro_batch_size(4)",
    ),
    (
        {"actor.model.ppo.forward_micro_batch_size": 3},
        "rlhf_ppo.actor.model.ppo.forward_micro_batch_size=3",
        "must divide rollout_micro_batch_size(4)",
    ),
    (
        {"actor.trainer.devices": 2, "actor.model.ppo.num_rollout_samples": 4},
        "rlhf_ppo.actor.model.ppo.num_rollout_samples=4",
        "multiple of rollout_micro_batch_size(4) x actor data-parallel size(2) = 8",
    ),
    (
        {"actor.trainer.devices": 2},
        "rlhf_ppo.actor.trainer.devices=2",
        "the actor would run 2 data-parallel copies, and it does not split rollouts over copies: set "
        "trainer.num_nodes(1) x trainer.devices to the tensor-parallel size (1)",
    ),
    ({"actor.trainer.precision": 16}, "rlhf_ppo.actor.trainer.precision=16", "fp16 training would need loss scaling"),
    ({"critic.trainer.precision": "16-mixed"}, "rlhf_ppo.critic.trainer.precision='16-mixed'", "use bf16 or 32"),
    # PPO's own ranges
    ({"actor.trainer.ppo.discount_factor": 1.5}, "rlhf_ppo.actor.trainer.ppo.discount_factor=1.5", "[0, 1]"),
    ({"actor.trainer.ppo.gae_lambda": -0.1}, "rlhf_ppo.actor.trainer.ppo.gae_lambda=-0.1", "[0, 1]"),
    (
        {"actor.trainer.ppo.initial_policy_kl_penalty": -0.01},
        "rlhf_ppo.actor.trainer.ppo.initial_policy_kl_penalty",
        ">= 0",
    ),
    ({"actor.model.ppo.ratio_eps": 0.0}, "rlhf_ppo.actor.model.ppo.ratio_eps=0.0", "positive"),
    ({"actor.model.ppo.entropy_bonus": -1.0}, "rlhf_ppo.actor.model.ppo.entropy_bonus=-1.0", ">= 0"),
    ({"critic.model.loss_clip_val": -0.2}, "rlhf_ppo.critic.model.loss_clip_val=-0.2", ">= 0"),
    ({"actor.trainer.ppo.max_steps": 0}, "rlhf_ppo.actor.trainer.ppo.max_steps=0", "positive"),
    ({"actor.model.ppo.sampling_params.top_p": 0.0}, "rlhf_ppo.actor.model.ppo.sampling_params.top_p=0.0", "(0, 1]"),
    (
        {"actor.model.ppo.length_params.min_length": 9},
        "rlhf_ppo.actor.model.ppo.length_params.min_length=9",
        "max_length(8)",
    ),
    # every model path set
    (
        {"actor.pretrained_checkpoint.restore_from_path": None},
        "rlhf_ppo.actor.pretrained_checkpoint.restore_from_path=None",
        "SFT",
    ),
    (
        {"critic.pretrained_checkpoint.restore_from_path": ""},
        "rlhf_ppo.critic.pretrained_checkpoint.restore_from_path=''",
        "reward-model",
    ),
    (
        {"reward_model.model.restore_from_path": None},
        "rlhf_ppo.reward_model.model.restore_from_path=None",
        "scores the rollouts",
    ),
    ({"initial_policy.model.restore_from_path": None}, "rlhf_ppo.initial_policy.model.restore_from_path=None", "KL"),
    ({"actor.model.data.data_prefix.train": ""}, "rlhf_ppo.actor.model.data.data_prefix.train=''", "prompts file"),
    (
        {"reward_model.model.reward_standardization": {"enable": True, "mean": 0.5}},
        "rlhf_ppo.reward_model.model.reward_standardization.std=None",
        "must be a positive number when enable is true",
    ),
    (
        {"reward_model.model.reward_standardization": {"enable": True, "std": 2.0}},
        "rlhf_ppo.reward_model.model.reward_standardization.mean=None",
        "set it (and std)",
    ),
    # what cannot run
    (
        {"critic.model.pipeline_model_parallel_size": 2},
        "rlhf_ppo.critic.model.pipeline_model_parallel_size=2",
        "without pipeline stages",
    ),
    (
        {"actor.model.pipeline_model_parallel_size": 2},
        "rlhf_ppo.actor.model.pipeline_model_parallel_size=2",
        "without pipeline stages",
    ),
    (
        {"reward_model.model.tensor_model_parallel_size": 2},
        "rlhf_ppo.reward_model.model.tensor_model_parallel_size=2",
        "TP(2) does not divide trainer.num_nodes(1) x trainer.devices(1) = 1",
    ),
    (
        {
            "critic.trainer.ppo.max_steps": 4,
            "critic.model.optim.sched.warmup_steps": 3,
            "critic.model.optim.sched.constant_steps": 1,
        },
        "rlhf_ppo.critic.model.optim.sched.warmup_steps=3",
        "warmup_steps(3) + constant_steps(1) must be below critic.trainer.ppo.max_steps(4)",
    ),
]


@pytest.mark.parametrize(("changes", "start", "fix"), RULES, ids=[rule[1].split("=")[0] for rule in RULES])
def test_each_rule_is_refused_with_key_value_and_fix(tiny, changes, start, fix):
    message = refusal(changed(tiny, **changes))
    assert message.startswith(start), message
    assert fix in message, message


def test_a_combined_critic_needs_no_reward_model_port_match(tiny):
    combined = changed(
        tiny,
        **{
            "critic.trainer.ppo.combine_rm_and_critic_server": True,
            "actor.remote_critic_rm.combine_rm_and_critic_server": True,
            "reward_model.port": 5557,  # unused: no reward-model role
            "reward_model.trainer.devices": 3,  # nor its layout
        },
    )
    assert PpoConfig.from_dict(combined).combined


def test_the_servers_split_the_rollout_micro_batch_over_their_data_parallel_ranks(tiny):
    cfg = PpoConfig.from_dict(
        changed(
            tiny,
            **{
                "critic.trainer.devices": 4,
                "critic.model.tensor_model_parallel_size": 2,
                "critic.model.global_batch_size": 8,
                "critic.exp_manager.checkpoint_callback_params.every_n_train_steps": 1,
                "critic.trainer.ppo.inference_micro_batch_size": 2,  # ceil(4 / (4 / 2))
            },
        )
    )
    assert cfg.role_data_parallel_size("critic", 4) == 2
