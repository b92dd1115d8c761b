"""Rendered scripts are compared byte for byte with golden files: a few training cases, and one representative
config of every stage group on every backend (golden/stages/<group>/<cluster_type>/: each script of the stage and
the printed plan, whose dependency, time and array columns show how the jobs are chained).

To refresh after an intended change: NEMO_LAUNCHER_UPDATE_GOLDEN=1 python3 -m pytest tests/launch/test_golden.py
then review `git diff tests/launch/golden`.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
FIXED = ["launcher_scripts_path=/opt/launcher", "data_dir=/data"]
CASES = {
    "gpt3_5b_bcm.sh": ["stages=[training]", "training=gpt3/5b", "cluster_type=bcm"],
    "gpt3_5b_bcm_container.sh": [
        "stages=[training]",
        "training=gpt3/5b",
        "cluster_type=bcm",
        "container=nvcr.io/example/launcher:1.0",
        "container_mounts=[/lustre,/scratch:/mnt/scratch,null]",
        "cluster.partition=batch",
        "cluster.account=llm",
        "wandb_api_key_file=<BRD>/wandb.key",
    ],
    "gpt3_5b_bcp.sh": ["stages=[training]", "training=gpt3/5b", "cluster_type=bcp"],
    "gpt3_5b_interactive.sh": [
        "stages=[training]",
        "training=gpt3/5b",
        "cluster_type=interactive",
        "training.trainer.num_nodes=1",
    ],
}

# One config per stage group that composes without user-specific values; training is covered by CASES above.
STAGE_CASES = {
    "data_preparation": "gpt3/download_gpt3_pile",
    "conversion": "gpt3/convert_gpt3",
    "fine_tuning": "gpt3/squad",
    "peft": "gpt3/squad",
    "prompt_learning": "gpt3/squad",
    "adapter_learning": "gpt3/squad",
    "ia3_learning": "gpt3/squad",
    "evaluation": "gpt3/evaluate_all",
    "export": "gpt3/export_gpt3",
    "fw_inference": "stable_diffusion/text2img",
    "rlhf_rm": "gpt3/2b_rm",
    "rlhf_ppo": "gpt3/2b_ppo",  # one heterogeneous job of four groups
    "rlhf_dpo": "gpt3/2b_dpo",  # the reference job, then DPO
    "rlhf_eval": "gpt3/tiny",
}
# The fine-tuning case tunes the default training run, gpt3/5b: every weight on TP 1 with plain Adam needs 115 GiB
# per GPU, which the launch memory check refuses; TP 2 fits.
# The RLHF trainers' reference sizes are 8 nodes: one node keeps the interactive case (this machine only) renderable.
STAGE_OVERRIDES = {
    "fine_tuning": ["fine_tuning.model.tensor_model_parallel_size=2"],
    "rlhf_rm": ["rlhf_rm.trainer.num_nodes=1"],
    "rlhf_dpo": ["rlhf_dpo.trainer.num_nodes=1"],
}
CLUSTER_TYPES = ("bcm", "bcp", "interactive")
# Refused, as tests/launch/test_rlhf_stages.py checks: BCP cannot place a heterogeneous job's groups.
REFUSED = {("rlhf_ppo", "bcp")}


def _overrides(golden_name: str, results: Path):
    """The case's overrides with <BRD> made real; the W&B key file they name is created first, since the launcher
    checks secret files before it writes anything."""
    key_file = results / "wandb.key"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text("0123abcd\n")
    key_file.chmod(0o600)
    return FIXED + [word.replace("<BRD>", str(results)) for word in CASES[golden_name]]


def _script(results: Path) -> Path:
    scripts = list(results.rglob("*_submission.sh"))
    assert len(scripts) == 1, scripts
    return scripts[0]


@pytest.mark.parametrize("golden_name", sorted(CASES))
def test_rendered_script_matches_golden(golden_name, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(_overrides(golden_name, results), results=results)
    assert code == 0, err
    script = _script(results)
    text = script.read_text().replace(str(results), "<BRD>")
    subprocess.run(["bash", "-n", str(script)], check=True)
    golden = GOLDEN / golden_name
    if os.environ.get("NEMO_LAUNCHER_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}; create it with NEMO_LAUNCHER_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"{script} differs from {golden}. If the change is intended, refresh with "
        "NEMO_LAUNCHER_UPDATE_GOLDEN=1 python3 -m pytest tests/launch/test_golden.py and review the diff."
    )


def _compare_with_golden(rendered, folder: Path) -> None:
    """rendered: {golden file name: text}; the folder must hold exactly those files with exactly that text."""
    if os.environ.get("NEMO_LAUNCHER_UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            stale.unlink()
        for name, text in rendered.items():
            (folder / name).write_text(text)
    assert folder.is_dir(), f"missing {folder}; create it with NEMO_LAUNCHER_UPDATE_GOLDEN=1"
    assert sorted(rendered) == sorted(p.name for p in folder.iterdir()), folder
    for name, text in rendered.items():
        assert text == (folder / name).read_text(), (
            f"{name} differs from {folder / name}. If the change is intended, refresh with "
            "NEMO_LAUNCHER_UPDATE_GOLDEN=1 python3 -m pytest tests/launch/test_golden.py and review the diff."
        )


def _plan_text(out: str, results: Path) -> str:
    """The printed plan with the results path as <BRD> and each column gap as two spaces: the columns' widths
    follow the length of the temporary path, which differs between runs."""
    plan = out[out.index("Pipeline, ") :].replace(str(results), "<BRD>")
    return "\n".join(re.sub(" {2,}", "  ", line.rstrip()) for line in plan.split("\n"))


@pytest.mark.parametrize(
    "group, cluster_type",
    [(group, cluster) for group in sorted(STAGE_CASES) for cluster in CLUSTER_TYPES if (group, cluster) not in REFUSED],
)
def test_every_stage_matches_golden_on_every_backend(group, cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    overrides = FIXED + [f"stages=[{group}]", f"{group}={STAGE_CASES[group]}", f"cluster_type={cluster_type}"]
    overrides += STAGE_OVERRIDES.get(group, [])
    code, out, err = launch(overrides, results=results)
    assert code == 0, err
    rendered = {"plan.txt": _plan_text(out, results)}
    for script in sorted(results.rglob("*_submission.sh")):
        subprocess.run(["bash", "-n", str(script)], check=True)
        name = str(script.relative_to(results)).replace("/", "__")
        rendered[name] = script.read_text().replace(str(results), "<BRD>")
    assert len(rendered) > 1, "the stage rendered no script"
    _compare_with_golden(rendered, GOLDEN / "stages" / group / cluster_type)


def test_rerendering_is_byte_identical(launch, tmp_path):
    results = tmp_path / "results"
    overrides = _overrides("gpt3_5b_bcm_container.sh", results)
    assert launch(overrides, results=results)[0] == 0
    first = {p: p.read_bytes() for p in results.rglob("*") if p.is_file() and p.name != "launcher_cmd.log"}
    assert launch(overrides, results=results)[0] == 0
    second = {p: p.read_bytes() for p in results.rglob("*") if p.is_file() and p.name != "launcher_cmd.log"}
    assert first == second


def test_resolved_config_has_no_interpolations_left(launch, tmp_path):
    results = tmp_path / "results"
    assert launch(FIXED + CASES["gpt3_5b_bcm.sh"], results=results)[0] == 0
    text = (results / "gpt3_5b" / "gpt3_5b_hydra.yaml").read_text()
    assert "${" not in text and "???" not in text
    assert f"explicit_log_dir: {results}/gpt3_5b/results" in text
    assert "ffn_hidden_size: 16384" in text


def test_cloud_preset_adds_env_and_mount_and_user_values_win(launch, tmp_path):
    results = tmp_path / "results"
    overrides = _overrides("gpt3_5b_bcm_container.sh", results) + ["env_preset=azure", "env_vars.NCCL_DEBUG=WARN"]
    assert launch(overrides, results=results)[0] == 0
    text = _script(results).read_text()
    assert "export NCCL_TOPO_FILE=/nccl/topo.xml\n" in text and "export NCCL_IB_TIMEOUT=22\n" in text
    assert "export NCCL_DEBUG=WARN\n" in text and "NCCL_DEBUG=INFO" not in text
    assert ",/opt/launcher/csp_tools/azure:/nccl " in text
