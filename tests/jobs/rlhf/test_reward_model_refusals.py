"""What the rlhf_rm schema (contract/schemas/rlhf_rm.py) and program refuse, each in one line naming the key, the
value and the fix; and how a run sized in epochs gets its steps.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_reward_model_refusals.py -q
"""

import pytest

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.rlhf_rm import RewardModelConfig

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir, rlhf_sft_nemo, rm_schedule, rm_section  # noqa: F401  (fixtures)
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)


def _section(config: str = "tiny") -> dict:
    return rm_section("/models/sft.nemo", "/data/prefs", "/results/rm", config)


def test_the_shipped_configs_bind_and_name_what_they_read_and_write():
    tiny = RewardModelConfig.from_dict(_section())
    assert tiny.trainer.max_steps == 48 and tiny.trainer.max_epochs is None and tiny.data_parallel_size(1) == 1
    assert tiny.exp_manager.checkpoint_callback_params.every_n_train_steps == 16
    assert tiny.nemo_path() == "/results/rm/checkpoints/megatron_gpt.nemo"
    assert tiny.reads() == [
        ("rlhf_rm.model.pretrained_checkpoint.restore_from_path", "/models/sft.nemo"),
        ("rlhf_rm.model.data.data_prefix.train", "/data/prefs/train_pairs.jsonl"),
        ("rlhf_rm.model.data.data_prefix.validation", "/data/prefs/validation_pairs.jsonl"),
        ("rlhf_rm.model.data.data_prefix.test", "/data/prefs/test_pairs.jsonl"),
    ]
    assert tiny.writes() == ["/results/rm"]
    big = RewardModelConfig.from_dict(_section("2b_rm"))
    assert (big.run.name, big.trainer.num_nodes, big.trainer.devices, big.trainer.precision) == (
        "rlhf_rm_2b",
        8,
        8,
        "bf16",
    )
    assert (big.model.global_batch_size, big.model.micro_batch_size, big.model.optim.lr) == (64, 1, 9e-6)
    assert (big.trainer.max_steps, big.trainer.max_epochs, big.data_parallel_size(64)) == (-1, 1, 64)


def _refused(section: dict, message: str) -> None:
    with pytest.raises(JobConfigError, match=message) as caught:
        RewardModelConfig.from_dict(section)
    assert "\n" not in str(caught.value)


def test_pipeline_parallelism_is_refused_with_the_reason():
    section = _section()
    section["model"]["pipeline_model_parallel_size"] = 2
    _refused(section, r"rlhf_rm.model.pipeline_model_parallel_size=2: the reward model trains without pipeline")


def test_a_global_batch_that_data_parallel_micro_batches_of_pairs_cannot_fill_is_refused():
    section = _section()
    section["trainer"]["devices"] = 4
    _refused(
        section,
        r"rlhf_rm.model.global_batch_size=16: must be a multiple of micro_batch_size\(8\) x data-parallel size\(4\)",
    )


def test_a_trainer_key_set_apart_from_trainer_rm_is_refused():
    section = _section()
    section["trainer"]["max_steps"] = 10
    _refused(section, r"rlhf_rm.trainer.max_steps=10: differs from rlhf_rm.trainer.rm.max_steps=48; set")


def test_a_run_without_a_length_is_refused():
    section = rm_schedule(_section(), max_epochs=None, max_steps=-1)
    _refused(section, r"rlhf_rm.trainer.rm.max_steps=-1: -1 runs max_epochs passes, and max_epochs is null")


def test_validation_without_validation_pairs_is_refused():
    section = _section()
    section["model"]["data"]["data_prefix"]["validation"] = None
    _refused(section, r"rlhf_rm.model.data.data_prefix.validation=None: validation .* needs held-out pairs")


def test_epochs_make_steps_and_a_step_limit_caps_them():
    epochs = RewardModelConfig.from_dict(rm_schedule(_section(), max_epochs=2, max_steps=-1))
    sized, sizing = epochs.sized_by_epochs(256)
    assert (sized.trainer.max_steps, sized.trainer.max_epochs) == (32, None)
    assert str(sizing) == "max_epochs=2 over 256 samples at global batch 16 = 32 optimizer steps"
    capped, _ = RewardModelConfig.from_dict(rm_schedule(_section(), max_epochs=2, max_steps=20)).sized_by_epochs(256)
    assert capped.trainer.max_steps == 20
    with pytest.raises(JobConfigError, match=r"model.data.data_prefix.train=4: .*fewer samples than one global batch"):
        epochs.sized_by_epochs(4)
    with pytest.raises(JobConfigError, match=r"warmup_steps\(4\) \+ constant_steps\(0\) must be below the run's"):
        epochs.sized_by_epochs(16)  # 2 steps


def test_the_job_refuses_pairs_longer_than_the_models_positions(tmp_path, rlhf_sft_nemo, preference_dir):  # noqa: F811
    from ..sft_support import run_tuning

    section = rm_section(rlhf_sft_nemo, preference_dir, tmp_path)
    section["model"]["encoder_seq_length"] = 128
    result = run_tuning("rlhf_rm", section, tmp_path, expect_rc=2)
    assert (
        "rlhf_rm.model.encoder_seq_length=128: longer than the max_position_embeddings(64) of "
        f"{rlhf_sft_nemo}; set at most 64"
    ) in result.stdout + result.stderr
    assert not (tmp_path / "checkpoints" / "megatron_gpt.nemo").exists()
