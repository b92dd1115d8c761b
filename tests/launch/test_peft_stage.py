"""The peft stage: LoRA jobs with the fine-tuning layout, their own results folder, and LoRA settings checked early."""

import subprocess

import pytest
import yaml

from .test_golden import FIXED

PEFT = ["stages=[peft]", "peft=gpt3/squad"]


@pytest.mark.parametrize("cluster_type", ["bcm", "bcp", "interactive"])
def test_lora_squad_renders_on_every_backend(cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(FIXED + PEFT + [f"cluster_type={cluster_type}"], results=results)
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.parent == results / "gpt3_5b" / "peft_squad"
    text = script.read_text()
    assert text.index("jobs.data.squad") < text.index("-m nemo_launcher.jobs.gpt.peft --config")
    config = yaml.safe_load(script.with_name("squad_gpt3_5b_hydra.yaml").read_text())
    assert config["model"]["peft"]["lora_tuning"]["target_modules"] == ["attention_qkv"]
    assert config["model"]["restore_from_path"] == f"{results}/gpt3_5b/convert_nemo/results/megatron_gpt.nemo"
    assert config["exp_manager"]["name"] == "megatron_gpt_peft_lora"
    if cluster_type == "bcm":
        assert "#SBATCH --ntasks-per-node=1\n" in text  # LoRA fits one GPU by default


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["peft.model.peft.peft_scheme=adapter"], ["peft.model.peft.peft_scheme", "adapter", "lora"]),
        (["peft.model.peft.lora_tuning.target_modules=[attention_qkv,attn]"], ["target_modules", "mlp_fc1"]),
        (["peft.model.peft.lora_tuning.adapter_dim=0"], ["adapter_dim", "positive integer"]),
        (["peft.model.peft.lora_tuning.alpha=-1"], ["alpha", "positive number"]),
        (["peft.model.peft.lora_tuning.adapter_dropout=1.5"], ["adapter_dropout", "[0, 1)"]),
    ],
)
def test_bad_lora_settings_are_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(PEFT + overrides, results=tmp_path / "r")
    assert code == 2, (out, err)
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "stage,choice,extra",
    [
        ("peft", "gpt3/squad", []),
        # 5B tuned whole on TP 1 with plain Adam does not fit an 80 GB GPU (test_fine_tuning_stage.py's FITS).
        ("fine_tuning", "gpt3/squad", ["fine_tuning.model.tensor_model_parallel_size=2"]),
        (
            "fine_tuning",
            "gpt3/custom_task",
            [
                "fine_tuning.model.tensor_model_parallel_size=2",
                "fine_tuning.model.data.train_ds.file_names=[/d/a.jsonl]",
                "fine_tuning.model.data.train_ds.concat_sampling_probabilities=[1.0]",
                "fine_tuning.model.data.validation_ds.file_names=[/d/v.jsonl]",
            ],
        ),
    ],
)
def test_the_job_accepts_every_key_the_launcher_writes(stage, choice, extra, launch, tmp_path):
    """The contract between the two sides: the resolved YAML binds to the job's schema (no torch needed)."""
    from nemo_launcher.contract.schemas.gpt_sft import SftConfig

    results = tmp_path / "results"
    assert launch([f"stages=[{stage}]", f"{stage}={choice}", *extra], results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    cfg = SftConfig.from_dict(yaml.safe_load(config.read_text()), stage=stage)
    assert cfg.trainer.precision_name() == "bf16" and cfg.model.optim.sched.name == "CosineAnnealing"
    assert (cfg.model.peft is not None) == (stage == "peft")


@pytest.mark.parametrize("family,nemo", [("t5", "megatron_t5.nemo"), ("mt5", "megatron_mt5.nemo")])
def test_t5_and_mt5_lora_render_and_bind(family, nemo, launch, tmp_path):
    """peft=t5/squad and peft=mt5/squad (no seed config names them): the T5 peft program after the SQuAD preparer,
    on the family's converted .nemo, with a section the job's schema binds."""
    from nemo_launcher.contract.schemas.gpt_sft import SftConfig

    results = tmp_path / "results"
    code, out, err = launch(["stages=[peft]", f"peft={family}/squad", "cluster_type=bcm"], results=results)
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert text.index("jobs.data.squad") < text.index("-m nemo_launcher.jobs.t5.peft --config")
    (config,) = results.rglob("*_hydra.yaml")
    cfg = SftConfig.from_dict(yaml.safe_load(config.read_text()), stage="peft")
    train_name = {"t5": "t5_220m", "mt5": "mt5_390m"}[family]
    assert cfg.model.restore_from_path == f"{results}/{train_name}/convert_nemo/results/{nemo}"
    assert cfg.exp_manager.name == f"megatron_{family}_peft_lora"
    assert (
        cfg.model.peft.lora_tuning.target_modules == ["attention_qkv"] and cfg.model.data.train_ds.max_seq_length == 512
    )
