"""The fine_tuning stage: SQuAD and custom-task SFT jobs, default paths from the training run, refusals."""

import subprocess

import pytest
import yaml

from .conftest import plan_rows
from .test_golden import FIXED

# It tunes the default training run, gpt3/5b: every weight with plain Adam on TP 1 needs 115 GiB per GPU (the
# launch-time memory check refuses it, test_predictions.py); TP 2 halves the weights' share.
FITS = ["fine_tuning.model.tensor_model_parallel_size=2"]
SQUAD = ["stages=[fine_tuning]", "fine_tuning=gpt3/squad", *FITS]


def _job(results, name="squad"):
    (script,) = results.rglob("*_submission.sh")
    (config,) = results.rglob("*_hydra.yaml")
    return script, script.read_text(), yaml.safe_load(config.read_text())


@pytest.mark.parametrize("cluster_type", ["bcm", "bcp", "interactive"])
def test_squad_renders_on_every_backend(cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(FIXED + SQUAD + [f"cluster_type={cluster_type}"], results=results)
    assert code == 0, err
    script, text, config = _job(results)
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.parent == results / "gpt3_5b" / "squad"
    # SQuAD is prepared by one task, then the trainer runs on every task.
    first, second = (
        text.index("-m nemo_launcher.jobs.data.squad --config"),
        text.index("-m nemo_launcher.jobs.gpt.finetune --config"),
    )
    assert first < second
    assert "${" not in script.with_name("squad_gpt3_5b_hydra.yaml").read_text()
    if cluster_type == "bcm":
        assert "--nodes=1 --ntasks=1" in text.splitlines()[text[:first].count("\n")]
        assert "#SBATCH --ntasks-per-node=8\n" in text and "#SBATCH --dependency=singleton\n" in text
    if cluster_type == "interactive":
        assert "--nproc_per_node=8 -m nemo_launcher.jobs.gpt.finetune" in text


def test_default_paths_follow_the_training_run(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(SQUAD + ["training=gpt3/tiny"], results=results)
    assert code == 0, err
    _, _, config = _job(results)
    assert config["run"]["name"] == "squad_gpt3_tiny"
    assert config["model"]["restore_from_path"] == f"{results}/gpt3_tiny/convert_nemo/results/megatron_gpt.nemo"
    assert config["exp_manager"]["explicit_log_dir"] == f"{results}/gpt3_tiny/squad/results"
    assert config["squad_preparation"]["train"]["output"] == config["model"]["data"]["train_ds"]["file_names"][0]
    assert config["model"]["data"]["validation_ds"]["prompt_template"] == "{input}\nAnswer: {output}"
    # Without a training config the seed's model name is used.
    code, out, err = launch(SQUAD + ["~training"], results=tmp_path / "r2")
    assert code == 0, err
    assert "gpt3_126m/squad" in out


def test_custom_task_has_no_squad_step(launch, tmp_path):
    results = tmp_path / "results"
    overrides = [
        "stages=[fine_tuning]",
        "fine_tuning=gpt3/custom_task",
        *FITS,
        "fine_tuning.model.data.train_ds.file_names=[/data/a.jsonl,/data/b.jsonl]",
        "fine_tuning.model.data.train_ds.concat_sampling_probabilities=[0.7,0.3]",
        "fine_tuning.model.data.validation_ds.file_names=[/data/v.jsonl]",
    ]
    code, out, err = launch(overrides, results=results)
    assert code == 0, err
    _, text, config = _job(results)
    assert "jobs.data.squad" not in text and "jobs.gpt.finetune" in text
    assert config["model"]["data"]["validation_ds"]["file_names"] == ["/data/v.jsonl"]


def test_chain_after_training_waits_for_it(launch, tmp_path):
    code, out, err = launch(
        [
            "stages=[training,fine_tuning]",
            "training=gpt3/tiny",
            "fine_tuning=gpt3/squad",
            "fine_tuning.trainer.devices=1",
        ],
        results=tmp_path / "results",
    )
    assert code == 0, err
    rows = plan_rows(out)
    assert [row[0] for row in rows] == ["training", "fine_tuning"]
    assert rows[1][3] == "afterok:DRYRUN-1,singleton"


@pytest.mark.parametrize(
    "overrides,words",
    [
        (
            ["fine_tuning.model.pipeline_model_parallel_size=2"],
            ["pipeline_model_parallel_size", "without pipeline parallelism"],
        ),
        (["fine_tuning.model.tensor_model_parallel_size=3"], ["TP(3)", "nodes(1) x devices(8) = 8"]),
        (
            ["fine_tuning.model.global_batch_size=20"],
            ["global_batch_size", "micro_batch_size(4) x data-parallel size(4) = 16"],
        ),
        (
            ["fine_tuning.model.restore_from_path=null"],
            ["fine_tuning.model.restore_from_path", "conversion stage writes"],
        ),
        (
            ["fine_tuning.model.data.train_ds.prompt_template='{output}: {input}'"],
            ["prompt_template", "end with {output}"],
        ),
        (
            ["fine_tuning.model.data.train_ds.concat_sampling_probabilities=[0.5,0.5]"],
            ["concat_sampling_probabilities", "one probability >= 0 per file (1 files)"],
        ),
    ],
)
def test_bad_fine_tuning_config_is_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(SQUAD + overrides, results=tmp_path / "r")
    assert code == 2, (out, err)
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_custom_task_needs_its_files(launch, tmp_path):
    code, out, err = launch(["stages=[fine_tuning]", "fine_tuning=gpt3/custom_task"], results=tmp_path / "r")
    assert code == 2 and "fine_tuning.model.data.train_ds.file_names" in err and "mandatory" in err
