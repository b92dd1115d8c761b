"""The vision families' downstream stages at launch: the seed's configs (conversion=vit/convert_vit and
clip/convert_clip, fine_tuning=vit/imagenet1k, evaluation=vit/imagenet_val and clip/imagenet_zeroshot,
data_preparation=vit/imagenet_webdataset) bind with the seed's values; whole pipelines chain through default paths
(each stage reads what the one before writes: the training run's own .nemo, the fine-tuned .nemo); and the mistakes
the jobs would hit are refused at launch in one line."""

import pytest
import yaml

from nemo_launcher.launch.stage_config import stage_config

from .conftest import plan_rows


def _config(results, name):
    return yaml.safe_load(next(results.rglob(f"{name}_hydra.yaml")).read_text())


def test_a_vit_pipeline_chains_without_overrides(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[data_preparation,training,conversion,fine_tuning,evaluation]",
            "data_preparation=vit/tiny_shape_folders",
            "training=vit/tiny",
            "conversion=vit/convert_vit",
            "fine_tuning=vit/tiny",
            "evaluation=vit/tiny",
            "check_inputs=true",
        ],
        results=results,
    )
    assert code == 0, err
    assert [row[0] for row in plan_rows(out)] == [
        "data_preparation",
        "training",
        "conversion",
        "fine_tuning",
        "evaluation",
    ]
    assert "a real run would refuse" not in err  # every input is written by an earlier stage
    training, conversion = _config(results, "vit_tiny"), _config(results, "convert_vit_tiny")
    tuning, evaluation = _config(results, "tiny_shapes_vit_tiny"), _config(results, "eval_tiny_shapes_val_vit_tiny")
    log_dir = training["exp_manager"]["explicit_log_dir"]
    assert conversion["model"]["checkpoint_folder"] == f"{log_dir}/checkpoints"
    assert conversion["model"]["hparams_file"] == f"{results}/vit_tiny/vit_tiny_hydra.yaml"
    assert conversion["run"]["nemo_file_name"] == "nemo_vit.nemo" and conversion["hf"]["mode"] == "off"
    assert tuning["model"]["restore_from_path"] == f"{log_dir}/checkpoints/nemo_vit_classification.nemo"
    tuned = f"{tuning['exp_manager']['explicit_log_dir']}/checkpoints/{tuning['exp_manager']['name']}.nemo"
    assert evaluation["model"]["restore_from_path"] == tuned
    scripts = {path.parent.name: path.read_text() for path in results.rglob("*_submission.sh")}
    for folder, program in (
        ("convert_nemo", "vision.convert"),
        ("tiny_shapes", "vit.finetune"),
        ("eval_tiny_shapes_val_vit_tiny", "vit.evaluate"),
    ):
        assert f"-m nemo_launcher.jobs.{program} --config" in scripts[folder]


def test_a_clip_pipeline_chains_without_overrides(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[training,conversion,evaluation]",
            "training=clip/tiny",
            "conversion=clip/convert_clip",
            "evaluation=clip/tiny",
        ],
        results=results,
    )
    assert code == 0, err
    training, evaluation = _config(results, "clip_tiny"), _config(results, "eval_tiny_shapes_zeroshot_clip_tiny")
    log_dir = training["exp_manager"]["explicit_log_dir"]
    assert evaluation["model"]["restore_from_path"] == f"{log_dir}/checkpoints/nemo_clip.nemo"
    assert _config(results, "convert_clip_tiny")["run"]["nemo_file_name"] == "nemo_clip.nemo"
    scripts = {path.parent.name: path.read_text() for path in results.rglob("*_submission.sh")}
    assert "-m nemo_launcher.jobs.clip.zeroshot --config" in scripts["eval_tiny_shapes_zeroshot_clip_tiny"]


def _stage(stage, choice, tmp_path, overrides=()):
    return stage_config(stage, choice, tmp_path / "data", tmp_path / "results", overrides)


def test_the_seeds_values(tmp_path):
    tuning = _stage("fine_tuning", "vit/imagenet1k", tmp_path)
    m = tuning["model"]
    assert (
        tuning["trainer"]["max_steps"],
        m["micro_batch_size"],
        m["global_batch_size"],
        m["img_h"],
        m["img_w"],
        m["head_type"],
        m["optim"]["name"],
        m["optim"]["lr"],
        m["optim"]["momentum"],
        m["optim"]["weight_decay"],
    ) == (20000, 64, 512, 384, 384, "linear", "sgd", 3.0e-3, 0.9, 0.0)
    assert m["restore_from_path"].endswith("/vit_B_16/results/checkpoints/nemo_vit_classification.nemo")
    assert tuning["run"]["results_dir"].endswith("/vit_B_16/imagenet_1k")
    vit_eval = _stage("evaluation", "vit/imagenet_val", tmp_path)
    assert vit_eval["model"]["restore_from_path"].endswith(
        "/vit_B_16/imagenet_1k/results/checkpoints/nemo_vit_classification.nemo"
    )
    assert vit_eval["model"]["data"]["imagenet_val"].endswith("/imagenet_1k/val")
    clip_eval = _stage("evaluation", "clip/imagenet_zeroshot", tmp_path)
    assert clip_eval["model"]["restore_from_path"].endswith("/clip_vit_B_32/results/checkpoints/nemo_clip.nemo")
    for family, name in (("vit", "nemo_vit.nemo"), ("clip", "nemo_clip.nemo")):
        conversion = _stage("conversion", f"{family}/convert_{family}", tmp_path)
        assert conversion["run"]["nemo_file_name"] == name and conversion["model"]["checkpoint_name"] == "latest"
        assert conversion["run"]["results_dir"].endswith("/convert_nemo")
    packing = _stage("data_preparation", "vit/imagenet_webdataset", tmp_path)
    assert packing["input_dir"].endswith("/imagenet_1k") and packing["splits"] == ["train", "val"]


VIT_CONVERT = ["stages=[conversion]", "conversion=vit/convert_vit", "training=vit/B_16"]
CLIP_CONVERT = ["stages=[conversion]", "conversion=clip/convert_clip", "training=clip/vit_B_32"]
TUNE = ["stages=[fine_tuning]", "fine_tuning=vit/imagenet1k", "training=vit/B_16"]
VIT_EVAL = ["stages=[evaluation]", "evaluation=vit/imagenet_val", "training=vit/B_16"]
CLIP_EVAL = ["stages=[evaluation]", "evaluation=clip/imagenet_zeroshot", "training=clip/vit_B_32"]
PACK = ["stages=[data_preparation]", "data_preparation=vit/imagenet_webdataset"]

REFUSALS = [
    (VIT_CONVERT, ["conversion.hf.mode=auto"], "conversion.hf.mode='auto': the ViT classifier"),
    (
        VIT_CONVERT,
        ["conversion.model.vocab_file=/v.json"],
        "conversion.model.vocab_file='/v.json': a ViT reads no text",
    ),
    (
        CLIP_CONVERT,
        ["conversion.model.pipeline_model_parallel_size=2"],
        "conversion.model.pipeline_model_parallel_size=2: ViT and CLIP have no pipeline parallelism",
    ),
    (CLIP_CONVERT, ["conversion.model.model_type=clip"], "conversion.model.model_type='clip'"),
    (TUNE, ["fine_tuning.model.img_h=390"], "fine_tuning.model.img_h=390: must be a multiple of patch_dim (16)"),
    (TUNE, ["fine_tuning.model.optim.momentum=1.5"], "fine_tuning.model.optim.momentum=1.5: must be in [0, 1)"),
    (TUNE, ["fine_tuning.model.optim.name=lamb"], "fine_tuning.model.optim.name='lamb'"),
    (TUNE, ["fine_tuning.model.megatron_amp_O2=false"], "fine_tuning.model.megatron_amp_O2=False"),
    (
        TUNE,
        ["fine_tuning.trainer.limit_val_batches=2", "fine_tuning.model.data.data_path=[/a]"],
        "fine_tuning.model.data.data_path=['/a']: validation",
    ),
    (TUNE, ["fine_tuning.model.global_batch_size=500"], "fine_tuning.model.global_batch_size=500"),
    (
        VIT_EVAL,
        ["evaluation.trainer.devices=8"],
        "evaluation.trainer.devices=8: the vision evaluation runs in one process",
    ),
    (VIT_EVAL, ["+evaluation.model.global_batch_size=1024"], "evaluation.model.global_batch_size=1024: one process"),
    (VIT_EVAL, ["evaluation.model.micro_batch_size=0"], "evaluation.model.micro_batch_size=0"),
    (CLIP_EVAL, ["evaluation.model.prompts=[a photo]"], "evaluation.model.prompts=['a photo']: list prompt templates"),
    (CLIP_EVAL, ["evaluation.trainer.accelerator=cpu"], "evaluation.model.precision='bf16': accelerator cpu"),
    (PACK, ["data_preparation.examples_per_shard=0"], "data_preparation.examples_per_shard=0"),
    (PACK, ["data_preparation.splits=[train,train]"], "data_preparation.splits=['train', 'train']"),
    (PACK, ["data_preparation.dataset=imagenet"], "data_preparation.dataset='imagenet': choose one of shape_folders"),
]


@pytest.mark.parametrize("base, overrides, words", REFUSALS, ids=[" ".join(o) for _, o, _ in REFUSALS])
def test_mistakes_are_refused_in_one_line(base, overrides, words, launch, tmp_path):
    code, out, err = launch([*base, *overrides], results=tmp_path / "results")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], err
