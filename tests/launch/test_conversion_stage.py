"""The conversion stage: TP x PP processes, nodes from cluster.gpus_per_node, default paths that follow the
training run, and the bad settings refused before anything is written."""

import subprocess

import pytest
import yaml

from .conftest import plan_rows
from .test_golden import FIXED

CONVERSION = ["stages=[conversion]", "conversion=gpt3/convert_gpt3"]


@pytest.mark.parametrize("cluster_type", ["bcm", "bcp", "interactive"])
def test_conversion_renders_on_every_backend(cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        FIXED + CONVERSION + [f"cluster_type={cluster_type}", "conversion.model.tensor_model_parallel_size=2"],
        results=results,
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.parent == results / "gpt3_5b" / "convert_nemo"
    text = script.read_text()
    assert "-m nemo_launcher.jobs.gpt.convert --config" in text
    if cluster_type == "bcm":
        assert "#SBATCH --nodes=1\n" in text and "#SBATCH --ntasks-per-node=2\n" in text
    elif cluster_type == "interactive":
        assert "--nproc_per_node=2" in text or "--nproc-per-node=2" in text
    config = yaml.safe_load(script.with_name("convert_gpt3_5b_hydra.yaml").read_text())
    train_dir = f"{results}/gpt3_5b"
    assert config["model"]["checkpoint_folder"] == f"{train_dir}/results/checkpoints"
    assert config["model"]["hparams_file"] == f"{train_dir}/gpt3_5b_hydra.yaml"
    assert config["run"]["results_dir"] == f"{train_dir}/convert_nemo"
    assert config["hf"]["output_dir"] == f"{train_dir}/convert_nemo/results/hf"


@pytest.mark.parametrize("tp,pp,nodes,tasks", [(1, 1, 1, 1), (2, 1, 1, 2), (8, 1, 1, 8), (8, 2, 2, 8), (4, 3, 2, 6)])
def test_nodes_are_ceil_of_model_parallel_size_over_gpus_per_node(tp, pp, nodes, tasks, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        CONVERSION
        + [f"conversion.model.tensor_model_parallel_size={tp}", f"conversion.model.pipeline_model_parallel_size={pp}"],
        results=results,
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    assert f"#SBATCH --nodes={nodes}\n" in script.read_text()
    assert f"#SBATCH --ntasks-per-node={tasks}\n" in script.read_text()


def test_conversion_follows_the_training_run_and_waits_for_it(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training,conversion]", "training=gpt3/tiny"], results=results)
    assert code == 0, err
    assert [row[3] for row in plan_rows(out)] == ["singleton", "afterok:DRYRUN-1"]
    (config,) = (results / "gpt3_tiny" / "convert_nemo").glob("*_hydra.yaml")
    config = yaml.safe_load(config.read_text())
    assert config["run"]["name"] == "convert_gpt3_tiny"
    # The training stage writes exactly the file conversion reads its model from.
    assert (results / "gpt3_tiny" / "gpt3_tiny_hydra.yaml").is_file()
    assert config["model"]["hparams_file"] == f"{results}/gpt3_tiny/gpt3_tiny_hydra.yaml"


@pytest.mark.parametrize(
    "overrides,words",
    [
        (
            ["conversion.model.tensor_model_parallel_size=0"],
            ["conversion.model.tensor_model_parallel_size", "positive integer"],
        ),
        (["conversion.model.model_parallel_size=3"], ["model_parallel_size", "TP(1) x PP(1) = 1"]),
        (
            ["conversion.model.tensor_model_parallel_size=3", "conversion.run.ntasks_per_node=2"],
            ["ntasks_per_node", "TP(3)"],
        ),
        (["conversion.model.checkpoint_folder=relative/dir"], ["conversion.model.checkpoint_folder", "absolute"]),
        (["conversion.hf.mode=sometimes"], ["conversion.hf.mode", "auto, required, off"]),
        (["conversion.hf.dtype=int8"], ["conversion.hf.dtype", "float32"]),
        (["conversion.run.nemo_file_name=a/b.nemo"], ["nemo_file_name", "a file name"]),
    ],
)
def test_bad_conversion_config_is_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(CONVERSION + overrides, results=tmp_path / "r")
    assert code == 2, (out, err)
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_the_job_accepts_every_key_the_launcher_writes(launch, tmp_path):
    from nemo_launcher.jobs.gpt.convert import ConversionConfig

    results = tmp_path / "results"
    assert launch(CONVERSION + ["conversion.model.tensor_model_parallel_size=2"], results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    cfg = ConversionConfig.from_dict(yaml.safe_load(config.read_text()))
    assert cfg.nemo_path == results / "gpt3_5b" / "convert_nemo" / "results" / "megatron_gpt.nemo"
    assert (cfg.model.tensor_model_parallel_size, cfg.hf.mode) == (2, "auto")
