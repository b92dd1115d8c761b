"""The GPT tuning job holds its settings to the `.nemo` it opens with the launcher's own rules
(contract/model_rules.py): a model the launcher could not read, or one replaced after the launch, is refused before
any weight is read, with the message the launcher would have printed."""

from tests.jobs.data_support import gpt2_files  # noqa: F401  (fixture)
from tests.jobs.sft_support import qa_jsonl, run_tuning, sft_section, tiny_bpe_files, tiny_nemo  # noqa: F401


def test_fine_tuning_longer_than_the_positions_of_the_nemo_is_refused_by_the_job(tmp_path, tiny_nemo, qa_jsonl):  # noqa: F811
    section = sft_section(tiny_nemo, qa_jsonl, str(tmp_path))
    section["model"]["data"]["train_ds"]["max_seq_length"] = 96
    result = run_tuning("finetune", section, tmp_path, expect_rc=2)
    line = (
        f"fine_tuning.model.data.train_ds.max_seq_length=96: the model ({tiny_nemo}) has 64 positions "
        "(max_position_embeddings): set at most 64"
    )
    assert line in result.stdout + result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "checkpoints").exists(), "refused before training began"


def test_t5_fine_tuning_longer_than_the_positions_of_the_nemo_is_refused_by_the_job(tmp_path):
    """The launcher accepted the config (32 source tokens); the file is changed after the launch to 96."""
    import yaml

    from tests.jobs.gpt_train_support import run_training
    from tests.jobs.t5_tuning_support import finetune_config, tiny_t5_nemo, write_task

    nemo = tiny_t5_nemo(tmp_path)
    config = finetune_config(tmp_path, nemo, write_task(tmp_path / "task"))
    section = yaml.safe_load(config.read_text())
    section["model"]["data"]["train_ds"]["max_src_seq_length"] = 96
    config.write_text(yaml.safe_dump(section))
    result = run_training(config, expect_rc=2, program=("nemo_launcher.jobs.t5.finetune",))
    line = (
        f"fine_tuning.model.data.train_ds.max_src_seq_length=96: the model ({nemo}) has 64 positions "
        "(max_position_embeddings): set at most 64"
    )
    assert line in result.stdout + result.stderr, result.stderr[-2000:]
