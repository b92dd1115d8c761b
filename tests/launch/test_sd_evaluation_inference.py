"""Stable Diffusion's evaluation and framework inference at launch: fid_clip renders for Slurm as four jobs
(generate an array over guidance scales, then fid, clip and plot, each afterok on the one before), a sub-stage
switched off drops its job, node_array_size must be len(classifier_free_guidance) x nnodes_per_cfg, and every
fw_inference config (stable_diffusion, dreambooth, instruct_pix2pix) renders one single-GPU job of its program."""

import re
import subprocess

import pytest


def _scripts(results):
    return {path.parent.name: path.read_text() for path in results.rglob("*_submission.sh")}


def test_fid_clip_renders_four_chained_jobs(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[evaluation]", "evaluation=stable_diffusion/fid_clip", "cluster_type=bcm", "check_inputs=false"],
        results=results,
    )
    assert code == 0, err
    scripts = _scripts(results)
    assert sorted(scripts) == ["clip", "fid", "generate", "plot"]
    for text in scripts.values():
        subprocess.run(["bash", "-n", "-c", text], check=True)
    assert "#SBATCH --array=0-7%8" in scripts["generate"]
    assert "nemo_launcher.jobs.fid_evaluation.generate" in scripts["generate"]
    assert not any("--array" in scripts[step] for step in ("fid", "clip", "plot"))
    # generate takes the node's GPUs, one per process; the scoring steps one GPU, the plot none.
    assert "#SBATCH --gpus-per-node=8" in scripts["generate"] and "--ntasks-per-node=8" in scripts["generate"]
    assert "#SBATCH --gpus-per-node=1\n" in scripts["fid"] and "#SBATCH --gpus-per-node=1\n" in scripts["clip"]
    assert "--gpus" not in scripts["plot"]
    # Each later job waits for the one before it (the plan's dependency column).
    assert re.search(r"_fid\s+DRYRUN-2\s+afterok:DRYRUN-1", out) and re.search(
        r"_clip\s+DRYRUN-3\s+afterok:DRYRUN-2", out
    )
    assert re.search(r"_plot\s+DRYRUN-4\s+afterok:DRYRUN-3", out)


def test_fid_clip_switches_and_array_size(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[evaluation]",
            "evaluation=stable_diffusion/fid_clip",
            "cluster_type=bcm",
            "check_inputs=false",
            "evaluation.compute_clip_scores=false",
            "evaluation.fid.classifier_free_guidance=[2,7.5]",
            "evaluation.fid.nnodes_per_cfg=2",
            "evaluation.run.node_array_size=4",
        ],
        results=results,
    )
    assert code == 0, err
    scripts = _scripts(results)
    assert sorted(scripts) == ["fid", "generate", "plot"] and "#SBATCH --array=0-3%4" in scripts["generate"]
    code, out, err = launch(
        [
            "stages=[evaluation]",
            "evaluation=stable_diffusion/fid_clip",
            "check_inputs=false",
            "evaluation.fid.classifier_free_guidance=[2,7.5]",
        ],
        results=tmp_path / "refused",
    )
    assert code == 2
    assert (
        "evaluation.run.node_array_size=8: must be len(fid.classifier_free_guidance) x fid.nnodes_per_cfg = 2 x 1 = 2"
        in err
    )


@pytest.mark.parametrize(
    "choice, program",
    [
        ("stable_diffusion/text2img", "stable_diffusion.text2img"),
        ("dreambooth/text2img", "stable_diffusion.text2img"),
        ("instruct_pix2pix/edit_cli", "stable_diffusion.edit_cli"),
    ],
)
def test_fw_inference_configs_render(choice, program, launch, tmp_path):
    results = tmp_path / "results"
    overrides = ["stages=[fw_inference]", f"fw_inference={choice}", "cluster_type=bcm", "check_inputs=false"]
    if choice.startswith("instruct_pix2pix"):
        overrides += ["fw_inference.edit.input=/data/cat.png", "fw_inference.edit.prompt=make it blue"]
    code, out, err = launch(overrides, results=results)
    assert code == 0, err
    (text,) = _scripts(results).values()
    assert f"nemo_launcher.jobs.{program}" in text and "--nodes=1" in text


def test_edit_cli_needs_its_input(launch, tmp_path):
    code, out, err = launch(
        ["stages=[fw_inference]", "fw_inference=instruct_pix2pix/edit_cli", "check_inputs=false"],
        results=tmp_path / "results",
    )
    assert code == 2 and "fw_inference.edit.input" in err


def test_download_coco2014_renders_one_job_and_refuses_missing_coco_files(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=fid_evaluation/download_coco2014",
            "cluster_type=bcm",
            "check_inputs=false",
        ],
        results=results,
    )
    assert code == 0, err
    (text,) = _scripts(results).values()
    assert (
        "nemo_launcher.jobs.fid_evaluation.preprocess" in text and "--cpus-per-task=8" in text and "--gpus" not in text
    )
    # Nothing downloads: a real run without the COCO files where the config says is refused (a dry run lists them).
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=fid_evaluation/download_coco2014",
            "cluster_type=bcm",
            "check_inputs=true",
            f"data_dir={tmp_path / 'empty'}",
        ],
        results=tmp_path / "refused",
    )
    assert code == 0 and "a real run would refuse data_preparation.coco_images_dir=" in err
    assert "a real run would refuse data_preparation.coco_captions_file=" in err
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=fid_evaluation/download_coco2014",
            "check_inputs=false",
            "data_preparation.preprocess_images=false",
            "data_preparation.preprocess_captions=false",
        ],
        results=tmp_path / "none",
    )
    assert code == 2 and "data_preparation.preprocess_images=False: every step is disabled" in err


def test_tiny_coco2014_plans_its_three_steps(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[data_preparation]", "data_preparation=fid_evaluation/tiny_coco2014", "cluster_type=bcm"],
        results=results,
    )
    assert code == 0, err
    assert sorted(_scripts(results)) == ["generate_shapes", "preprocess", "standin_scorers"]


def test_mlperf_fid_clip_scores_one_scale_against_the_targets(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[evaluation]",
            "evaluation=stable_diffusion/mlperf_fid_clip",
            "cluster_type=bcm",
            "check_inputs=false",
        ],
        results=results,
    )
    assert code == 0, err
    scripts = _scripts(results)
    assert sorted(scripts) == ["clip", "fid", "generate", "plot"] and "--array" not in scripts["generate"]
    code, out, err = launch(
        [
            "stages=[evaluation]",
            "evaluation=stable_diffusion/mlperf_fid_clip",
            "check_inputs=false",
            "evaluation.plot_fid_clip=false",
        ],
        results=tmp_path / "refused",
    )
    assert code == 2 and "evaluation.plot_fid_clip=False: the plot step reports the targets" in err
