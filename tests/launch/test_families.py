"""Model families are data: each row's schemas exist and bind, its configs agree with it (the .nemo its conversion
writes is the one its downstream configs read), a whole pipeline of a family chains without overrides, and the
stage classes name no family, program or family key."""

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest
import yaml

from nemo_launcher.launch.errors import ConfigError
from nemo_launcher.launch.families import FAMILIES, family_for, program_for
from nemo_launcher.launch.resolvers import REPO_ROOT
from nemo_launcher.launch.stages import STAGES

from .conftest import plan_rows

CONF = REPO_ROOT / "conf"
STAGE_DIR = REPO_ROOT / "nemo_launcher" / "launch" / "stages"


def _schema(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_row_names_known_stages_importable_schemas_and_job_modules(name):
    family = FAMILIES[name]
    assert set(family.programs) == set(family.schemas) and set(family.programs) <= set(STAGES)
    for stage, path in family.schemas.items():
        assert callable(_schema(path).from_dict), path
        assert family.programs[stage].startswith("nemo_launcher.jobs."), family.programs[stage]
    # A stage has a preparation program exactly when its schema says when and with what that program runs.
    for stage, program in family.preparers.items():
        assert stage in family.programs and program.startswith("nemo_launcher.jobs.")
    prepared = {stage for stage, path in family.schemas.items() if hasattr(_schema(path), "preparation_args")}
    assert prepared == set(family.preparers), name
    # A stage's other programs (DPO's reference job, PPO's roles) are job modules named after one of its stages.
    for kind, program in family.role_programs.items():
        assert kind not in family.programs and any(kind.startswith(f"{stage}_") for stage in family.programs), kind
        assert importlib.util.find_spec(program) is not None, program


def test_mt5_is_t5_with_its_own_configs():
    t5, mt5 = FAMILIES["t5"], FAMILIES["mt5"]
    assert (mt5.programs, mt5.schemas, mt5.preparers) == (t5.programs, t5.schemas, t5.preparers)
    assert (t5.nemo_file_name, mt5.nemo_file_name) == ("megatron_t5.nemo", "megatron_mt5.nemo")
    assert t5.programs["training"] == "nemo_launcher.jobs.t5.train"
    assert FAMILIES["bert"].programs["training"] == "nemo_launcher.jobs.bert.train"


def test_a_family_without_the_stage_is_refused_with_what_it_has():
    with pytest.raises(
        ConfigError,
        match=r"fine_tuning='bert/squad': the bert family has no fine_tuning program yet; "
        r"it has: conversion, data_preparation, training",
    ):
        program_for(FAMILIES["bert"], "fine_tuning", "bert/squad")
    with pytest.raises(ConfigError, match=r"known model family \(bert, .*gpt3, .*t5, vit\)"):
        family_for("training", "falcon/7b")  # a family the reference has and this launcher has not


def _configs(group: str, family: str):
    return sorted(f"{family}/{p.stem}" for p in (CONF / group / family).glob("*.yaml"))


def _resolved(launch, tmp_path, group, choice, *extra):
    results = tmp_path / choice.replace("/", "_")
    code, out, err = launch([f"stages=[{group}]", f"{group}={choice}", "~training", *extra], results=results)
    assert code == 0, err
    (config,) = results.rglob("*_hydra.yaml")
    return yaml.safe_load(config.read_text()), results


CHAINED = [
    (f, g, c)
    for f in sorted(FAMILIES)
    if FAMILIES[f].nemo_file_name
    for g in ("conversion", "fine_tuning", "export")
    for c in _configs(g, f)
]


@pytest.mark.parametrize("family, group, choice", CHAINED, ids=[f"{g}={c}" for _, g, c in CHAINED])
def test_configs_write_and_read_the_rows_nemo_file(family, group, choice, launch, tmp_path):
    extra = []
    if choice.endswith("custom_task"):  # the files these configs ask for
        keys = ("file_names",) if family == "gpt3" else ("src_file_name", "tgt_file_name")
        extra = [
            f"fine_tuning.model.data.{split}.{key}=[/data/{split}_{key}]"
            for split in ("train_ds", "validation_ds")
            for key in keys
        ]
        extra += ["fine_tuning.model.data.train_ds.concat_sampling_probabilities=[1.0]"]
    config, results = _resolved(launch, tmp_path, group, choice, *extra)
    nemo = FAMILIES[family].nemo_file_name
    if group == "conversion":
        assert config["run"]["nemo_file_name"] == nemo
        return
    path = config["model"]["restore_from_path" if group == "fine_tuning" else "checkpoint_path"]
    train_name = config["run"]["model_train_name"]
    assert path == f"{results}/{train_name}/convert_nemo/results/{nemo}"


@pytest.mark.parametrize("family, size", [("t5", "tiny"), ("mt5", "tiny")])
def test_a_t5_pipeline_chains_without_overrides(family, size, launch, tmp_path):
    """training -> conversion -> fine-tuning -> evaluation -> export: each stage reads what the one before writes,
    so with the input check on, the only inputs a real run would miss are the data and the SQuAD/XQuAD files."""
    results = tmp_path / "results"
    task = "squad" if family == "t5" else "xquad"
    code, out, err = launch(
        [
            "stages=[training,conversion,fine_tuning,evaluation,export]",
            f"training={family}/{size}",
            f"conversion={family}/convert_{family}",
            f"fine_tuning={family}/{task}",
            f"evaluation={family}/{task}",
            f"export={family}/export_{family}",
            "check_inputs=true",
        ],
        results=results,
    )
    assert code == 0, err
    assert [row[0] for row in plan_rows(out)] == ["training", "conversion", "fine_tuning", "evaluation", "export"]
    missing = [line for line in err.splitlines() if line.startswith("Warning: a real run would refuse")]
    assert missing, "the tiny data and SQuAD files are not here: the dry run lists them"
    for line in missing:
        assert any(word in line for word in ("preprocessed_dir", "tokenizer", "squad_preparation")), line
    configs = {
        stage: yaml.safe_load(next(results.rglob(f"*{stage_dir}/*_hydra.yaml")).read_text())
        for stage, stage_dir in (("conversion", "convert_nemo"), ("fine_tuning", task), ("evaluation", f"{task}_eval"))
    }
    conversion, fine_tuning, evaluation = configs["conversion"], configs["fine_tuning"], configs["evaluation"]
    assert (
        fine_tuning["model"]["restore_from_path"]
        == f"{conversion['run']['results_dir']}/results/{conversion['run']['nemo_file_name']}"
    )
    tuned = f"{fine_tuning['exp_manager']['explicit_log_dir']}/checkpoints/{fine_tuning['exp_manager']['name']}.nemo"
    assert evaluation["model"]["restore_from_path"] == tuned
    assert (
        evaluation["model"]["data"]["validation_ds"]["names"] == fine_tuning["model"]["data"]["validation_ds"]["names"]
    )
    scripts = {path.parent.name: path.read_text() for path in results.rglob("*_submission.sh")}
    assert "-m nemo_launcher.jobs.t5.squad_data --config" in scripts[task]
    assert scripts[task].index("jobs.t5.squad_data") < scripts[task].index("jobs.t5.finetune")
    assert "jobs.t5.squad_data" in scripts[f"{task}_eval"] and "jobs.t5.evaluate" in scripts[f"{task}_eval"]


def test_bert_trains_and_converts(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[training,conversion]", "training=bert/tiny", "conversion=bert/convert_bert"], results=results
    )
    assert code == 0, err
    text = next(results.rglob("*convert_bert_tiny*_submission.sh")).read_text()
    assert "-m nemo_launcher.jobs.bert.convert --config" in text
    config = yaml.safe_load(next(results.rglob("convert_bert_tiny_hydra.yaml")).read_text())
    assert config["model"]["hparams_file"] == f"{results}/bert_tiny/bert_tiny_hydra.yaml"


# What a stage class must not hold: job programs, family names, keys only one family's schema has.
FAMILY_WORDS = ("nemo_launcher.jobs", "gpt", "t5", "bert", "squad", "prepare_sample_data", "task_data_dir", "megatron_")


def _code_names_and_strings(path: Path):
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.Name):
            yield node.id


@pytest.mark.parametrize("path", sorted(p.name for p in STAGE_DIR.glob("*.py") if p.name != "data_preparation.py"))
def test_stage_classes_hold_no_family_assumptions(path):
    words = [w for w in _code_names_and_strings(STAGE_DIR / path) if any(f in w.lower() for f in FAMILY_WORDS)]
    assert not words, f"{path} names {words}: move them into the family's row (launch/families.py) or its schema"


@pytest.mark.parametrize(
    "preparation, training",
    [("t5/tiny_pile", "t5/tiny"), ("mt5/tiny_mc4", "mt5/tiny"), ("bert/tiny_pile", "bert/tiny")],
)
def test_tiny_training_reads_what_the_tiny_data_preparation_writes(preparation, training, launch, tmp_path):
    code, out, err = launch(
        [
            "stages=[data_preparation,training]",
            f"data_preparation={preparation}",
            f"training={training}",
            "check_inputs=true",
        ],
        results=tmp_path / "results",
    )
    assert code == 0, err
    assert "would refuse training" not in err, err


def test_a_stage_of_another_family_than_the_training_run_it_follows_is_refused(launch, tmp_path):
    results = tmp_path / "results"
    code, _, err = launch(
        ["stages=[training,conversion]", "training=gpt3/tiny", "conversion=mt5/convert_mt5"], results=results
    )
    assert code == 2 and "conversion='mt5/convert_mt5'" in err and "follows the training run 'gpt3_tiny'" in err
    assert "training=gpt3/tiny" in err and "training=mt5/<size>" in err
    code, _, err = launch(
        ["stages=[training,fine_tuning]", "training=gpt3/tiny", "fine_tuning=t5/squad"], results=results
    )
    assert code == 2 and "follows the training run 'gpt3_tiny'" in err
    assert not results.exists()


def test_an_unselected_training_config_of_another_family_is_not_followed(launch, tmp_path):
    """The default training=gpt3/5b, not among the stages, does not decide a T5 stage's run: the stage follows its
    own family's default run, so every downstream config dry-runs on its own."""
    code, out, err = launch(["stages=[conversion]", "conversion=t5/convert_t5"], results=tmp_path / "results")
    assert code == 0, err
    assert f"conversion: {tmp_path / 'results' / 't5_220m' / 'convert_nemo'}" in out
    code, out, err = launch(
        ["stages=[fine_tuning,evaluation]", "fine_tuning=mt5/xquad", "evaluation=mt5/xquad"], results=tmp_path / "mt5"
    )
    assert code == 0, err
    assert f"evaluation: {tmp_path / 'mt5' / 'mt5_390m' / 'xquad_eval'}" in out
