"""The export stage: one CPU task writing a Triton model repository where the seed puts it, the
FasterTransformer-only settings refused with a reason, and the stated TP/PP of the .nemo held against the model the
job will read (the .nemo on disk, or this pipeline's conversion stage)."""

import io
import subprocess
import tarfile

import pytest
import yaml

from .conftest import plan_rows
from .test_golden import FIXED

EXPORT = ["stages=[export]", "export=gpt3/export_gpt3"]


@pytest.mark.parametrize("cluster_type", ["bcm", "bcp", "interactive"])
def test_export_renders_on_every_backend(cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(FIXED + EXPORT + [f"cluster_type={cluster_type}"], results=results)
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.parent == results / "gpt3_5b" / "export_tp1_pp1_fp16_fp16"
    text = script.read_text()
    assert "-m nemo_launcher.jobs.gpt.export --config" in text and "torch.distributed.run" not in text
    config = yaml.safe_load(script.with_name("export_gpt3_5b_hydra.yaml").read_text())
    assert config["model"]["checkpoint_path"] == f"{results}/gpt3_5b/convert_nemo/results/megatron_gpt.nemo"
    assert (
        config["triton_deployment"]["triton_model_dir"]
        == f"{results}/gpt3_5b/export_tp1_pp1_fp16_fp16/model_repo/gpt3_5b"
    )
    if cluster_type == "bcm":
        assert "#SBATCH --nodes=1\n" in text and "#SBATCH --ntasks-per-node=1\n" in text
        assert "gpus-per-node" not in text, "export needs no GPU"


def test_results_dir_names_the_settings(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        EXPORT
        + ["training=gpt3/tiny", "export.model.weight_data_type=fp32", "export.triton_deployment.data_type=bf16"],
        results=results,
    )
    assert code == 0, err
    (config,) = results.rglob("*_hydra.yaml")
    assert config.parent == results / "gpt3_tiny" / "export_tp1_pp1_fp32_bf16"


def test_export_follows_training_and_conversion_paths(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[training,fine_tuning,export]",
            "training=gpt3/tiny",
            "fine_tuning=gpt3/squad",
            "fine_tuning.trainer.devices=1",
            "fine_tuning.model.data.train_ds.max_seq_length=128",  # the tiny model's positions
            "export=gpt3/export_gpt3",
        ],
        results=results,
    )
    assert code == 0, err
    assert [row[3] for row in plan_rows(out)] == ["singleton", "afterok:DRYRUN-1,singleton", "afterok:DRYRUN-2"]
    configs = {p.parent.name: yaml.safe_load(p.read_text()) for p in results.rglob("*_hydra.yaml")}
    converted = f"{results}/gpt3_tiny/convert_nemo/results/megatron_gpt.nemo"
    assert configs["squad"]["model"]["restore_from_path"] == converted
    assert configs["export_tp1_pp1_fp16_fp16"]["model"]["checkpoint_path"] == converted


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["export.model.tensor_model_parallel_size=0"], ["export.model.tensor_model_parallel_size=0", "positive"]),
        (
            ["export.triton_deployment.pipeline_model_parallel_size=-1"],
            ["export.triton_deployment.pipeline_model_parallel_size=-1", "positive"],
        ),
        (["export.triton_deployment.int8_mode=true"], ["int8_mode", "FasterTransformer"]),
        (["export.model.weight_data_type=int4"], ["weight_data_type", "fp32, fp16, bf16"]),
        (["export.triton_deployment.instance_kind=KIND_TPU"], ["instance_kind", "KIND_AUTO"]),
        (["export.triton_deployment.tokens_to_generate=0"], ["tokens_to_generate", "positive integer"]),
    ],
)
def test_bad_export_config_is_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(EXPORT + overrides, results=tmp_path / "r")
    assert code == 2, (out, err)
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_the_job_accepts_every_key_the_launcher_writes(launch, tmp_path):
    from nemo_launcher.jobs.gpt.export import ExportConfig

    results = tmp_path / "results"
    assert launch(EXPORT, results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    cfg = ExportConfig.from_dict(yaml.safe_load(config.read_text()))
    assert (cfg.model.weight_data_type, cfg.triton_deployment.data_type) == ("fp16", "fp16")


SEED_EXPORT = [  # seed 001, "Base Command Platform" GPT export, as printed (paths under this test's results)
    "stages=[export]",
    "cluster_type=bcp",
    "launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts",
    "data_dir=/mount/data/the_pile_gpt3",
    "export.run.model_train_name=gpt3_126m",
    "export.model.tensor_model_parallel_size=2",
    "export.triton_deployment.pipeline_model_parallel_size=1",
]


def test_the_seed_command_exports_a_tp2_model(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(SEED_EXPORT, results=results)
    assert code == 0, err
    (config_file,) = results.rglob("*_hydra.yaml")
    assert config_file.parent == results / "gpt3_126m" / "export_tp2_pp1_fp16_fp16"
    config = yaml.safe_load(config_file.read_text())
    assert config["model"]["tensor_model_parallel_size"] == 2
    (script,) = results.rglob("*_submission.sh")
    assert "--npernode 1 " in script.read_text(), "one task gathers the shards; no rank per shard"


def write_nemo_config(path, **model):
    """A .nemo holding only its model_config.yaml: what the launcher reads (the weights stay unread)."""
    data = yaml.safe_dump({"num_layers": 2, "num_attention_heads": 4, **model}).encode()
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("model_config.yaml")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    "layout,overrides,words",
    [
        (
            {"tensor_model_parallel_size": 2},
            [],
            ["export.model.tensor_model_parallel_size=1", "has TP(2) x PP(1) shards: set 2", "model_config.yaml"],
        ),
        (
            {},
            ["export.model.tensor_model_parallel_size=2"],
            ["export.model.tensor_model_parallel_size=2", "has TP(1) x PP(1) shards: set 1"],
        ),
        (
            {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
            ["export.model.tensor_model_parallel_size=2"],
            ["export.triton_deployment.pipeline_model_parallel_size=1", "TP(2) x PP(2)", "set 2"],
        ),
        (
            {"tensor_model_parallel_size": 3, "num_attention_heads": 32},
            ["export.model.tensor_model_parallel_size=3"],
            ["export.model.tensor_model_parallel_size=3", "32 attention heads", "TP(3) does not divide"],
        ),
        (
            {"pipeline_model_parallel_size": 3, "num_layers": 4},
            ["export.triton_deployment.pipeline_model_parallel_size=3"],
            ["pipeline_model_parallel_size=3", "4 layers", "PP(3) does not divide"],
        ),
    ],
)
def test_a_layout_the_nemo_on_disk_does_not_have_is_refused(layout, overrides, words, launch, tmp_path):
    nemo = write_nemo_config(tmp_path / "megatron_gpt.nemo", **layout)
    code, out, err = launch(EXPORT + [f"export.model.checkpoint_path={nemo}"] + overrides, results=tmp_path / "r")
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert all(word in err for word in words), err
    assert str(nemo) in err
    assert not (tmp_path / "r").exists()


def test_the_layout_of_the_nemo_on_disk_is_accepted(launch, tmp_path):
    nemo = write_nemo_config(
        tmp_path / "megatron_gpt.nemo", tensor_model_parallel_size=2, pipeline_model_parallel_size=2
    )
    overrides = ["export.model.tensor_model_parallel_size=2", "export.triton_deployment.pipeline_model_parallel_size=2"]
    code, out, err = launch(EXPORT + [f"export.model.checkpoint_path={nemo}"] + overrides, results=tmp_path / "r")
    assert code == 0, err
    (config,) = (tmp_path / "r").rglob("*_hydra.yaml")
    assert config.parent.name == "export_tp2_pp2_fp16_fp16"


def test_a_file_that_is_not_a_nemo_is_refused(launch, tmp_path):
    nemo = tmp_path / "megatron_gpt.nemo"
    nemo.write_text("weights: none\n")
    code, out, err = launch(EXPORT + [f"export.model.checkpoint_path={nemo}"], results=tmp_path / "r")
    assert code == 2, (out, err)
    assert f"export.model.checkpoint_path='{nemo}': is not a readable .nemo archive" in err
    assert not (tmp_path / "r").exists()


CONVERT_THEN_EXPORT = ["stages=[conversion,export]", "training=gpt3/tiny", "export=gpt3/export_gpt3"]


def test_export_tp_must_match_the_conversion_of_the_same_pipeline(launch, tmp_path):
    code, out, err = launch(
        CONVERT_THEN_EXPORT + ["conversion.model.tensor_model_parallel_size=2"], results=tmp_path / "r"
    )
    assert code == 2, (out, err)
    assert "export.model.tensor_model_parallel_size=1" in err, err
    assert "the .nemo this pipeline's conversion stage writes has TP(2) x PP(1) shards: set 2" in err
    assert not (tmp_path / "r").exists()


def test_the_conversion_of_the_same_pipeline_outranks_an_older_nemo(launch, tmp_path):
    """A .nemo left by an earlier conversion at TP 1 is replaced by this pipeline's TP 2 one: TP 2 is right."""
    results = tmp_path / "r"
    old = results / "gpt3_tiny" / "convert_nemo" / "results" / "megatron_gpt.nemo"
    old.parent.mkdir(parents=True)
    write_nemo_config(old)
    code, out, err = launch(
        CONVERT_THEN_EXPORT
        + ["conversion.model.tensor_model_parallel_size=2", "export.model.tensor_model_parallel_size=2"],
        results=results,
    )
    assert code == 0, err
    assert [row[0] for row in plan_rows(out)] == ["conversion", "export"]
