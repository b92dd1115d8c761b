"""The evaluation stage: lm-eval on the converted model of the training run, task names checked before
anything is written, TP processes per job."""

import subprocess

import pytest
import yaml

from .conftest import plan_rows
from .test_golden import FIXED

EVALUATION = ["stages=[evaluation]", "evaluation=gpt3/evaluate_all"]


@pytest.mark.parametrize("cluster_type", ["bcm", "bcp", "interactive"])
def test_evaluation_renders_on_every_backend(cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        FIXED + EVALUATION + [f"cluster_type={cluster_type}", "evaluation.model.tensor_model_parallel_size=2"],
        results=results,
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.parent == results / "gpt3_5b" / "eval_all"
    assert "-m nemo_launcher.jobs.gpt.evaluate --config" in script.read_text()
    if cluster_type == "bcm":
        assert "#SBATCH --nodes=1\n" in script.read_text() and "#SBATCH --ntasks-per-node=2\n" in script.read_text()
    config = yaml.safe_load(script.with_name("eval_all_gpt3_5b_hydra.yaml").read_text())
    assert config["run"]["tasks"] == "all_tasks"
    assert config["run"]["task_data_dir"] == "/data/eval_harness_data"
    assert config["model"]["nemo_model"] == f"{results}/gpt3_5b/convert_nemo/results/megatron_gpt.nemo"


def test_lambada_config(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[evaluation]", "evaluation=gpt3/evaluate_lambada"], results=results)
    assert code == 0, err
    (config,) = (results / "gpt3_5b" / "eval_lambada").glob("*_hydra.yaml")
    config = yaml.safe_load(config.read_text())
    assert (config["run"]["name"], config["run"]["tasks"]) == ("eval_lambada_gpt3_5b", "lambada")


def test_default_pipeline_chains_training_conversion_evaluation(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training,conversion,evaluation]", "training=gpt3/tiny"], results=results)
    assert code == 0, err
    assert [row[0] for row in plan_rows(out)] == ["training", "conversion", "evaluation"]
    assert [row[3] for row in plan_rows(out)] == ["singleton", "afterok:DRYRUN-1", "afterok:DRYRUN-2,singleton"]
    conversion = yaml.safe_load(next((results / "gpt3_tiny" / "convert_nemo").glob("*_hydra.yaml")).read_text())
    evaluation = yaml.safe_load(next((results / "gpt3_tiny" / "eval_all").glob("*_hydra.yaml")).read_text())
    written = f"{conversion['run']['results_dir']}/results/{conversion['run']['nemo_file_name']}"
    assert evaluation["model"]["nemo_model"] == written


@pytest.mark.parametrize("tasks", ["lambada", "'lambada,piqa'", "[piqa,wikitext103]", "all_tasks"])
def test_task_names_accepted(tasks, launch, tmp_path):
    code, out, err = launch(EVALUATION + [f"evaluation.run.tasks={tasks}"], results=tmp_path / "r")
    assert code == 0, err


@pytest.mark.parametrize(
    "overrides,words",
    [
        (
            ["evaluation.run.tasks=[lambada,mmlu]"],
            ["evaluation.run.tasks", "unknown task 'mmlu'", "all_tasks", "winogrande"],
        ),
        (["evaluation.model.pipeline_model_parallel_size=2"], ["pipeline_model_parallel_size", "set 1"]),
        (
            ["evaluation.model.tensor_model_parallel_size=0"],
            ["evaluation.model.tensor_model_parallel_size", "positive integer"],
        ),
        (["evaluation.model.eval_batch_size=0"], ["eval_batch_size", "positive integer"]),
        (["evaluation.model.nemo_model=model.nemo"], ["evaluation.model.nemo_model", "absolute"]),
        (["evaluation.run.task_data_dir=data"], ["evaluation.run.task_data_dir", "absolute"]),
    ],
)
def test_bad_evaluation_config_is_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(EVALUATION + overrides, results=tmp_path / "r")
    assert code == 2, (out, err)
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_the_job_accepts_every_key_the_launcher_writes(launch, tmp_path):
    from nemo_launcher.jobs.gpt.evaluate import EvaluationConfig

    results = tmp_path / "results"
    assert launch(EVALUATION, results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    cfg = EvaluationConfig.from_dict(yaml.safe_load(config.read_text()))
    assert cfg.results_file == results / "gpt3_5b" / "eval_all" / "results" / "lm_eval_results.json"
    assert cfg.model.precision_name() is None and cfg.model.eval_batch_size == 4
