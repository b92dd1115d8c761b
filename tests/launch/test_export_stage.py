"""The export stage: one CPU task writing a Triton model repository where the seed puts it, and the
FasterTransformer-only settings refused with a reason."""

import subprocess

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
        (
            ["export.model.tensor_model_parallel_size=8"],
            ["export.model.tensor_model_parallel_size", "8", "one process"],
        ),
        (["export.triton_deployment.pipeline_model_parallel_size=2"], ["pipeline_model_parallel_size", "set 1"]),
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
