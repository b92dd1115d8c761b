"""An evaluation that prepares its own reference set: `reference_data` (the keys of data_preparation=fid_evaluation/*
without `run`) adds a first step to fid_clip, so `--config-name=quickstart_sd` can spend its one data_preparation
stage on the training data. The step writes what the later steps would otherwise need at launch, and a path the
later steps read that the step does not write is refused."""

import re


def test_quickstart_sd_evaluation_prepares_its_reference_set_first(launch, tmp_path):
    data = tmp_path / "empty_data"
    code, out, err = launch(
        ["cluster_type=bcm", f"data_dir={data}"], config_name="quickstart_sd", results=tmp_path / "results"
    )
    assert code == 0, err
    steps = re.findall(r"^evaluation\s+\S*eval_fid_clip_stable_diffusion_tiny_(\w+)\s", out, re.M)
    assert steps == ["reference_data", "generate", "fid", "clip", "plot"]
    script = next((tmp_path / "results").rglob("*_reference_data_submission.sh")).read_text()
    assert "nemo_launcher.jobs.fid_evaluation.reference_data" in script
    # Nothing under the COCO stand-in, nor the random scorers, is asked for at launch: the first step writes them.
    assert "fid_evaluation" not in err, err


def test_reference_data_must_feed_the_later_steps(launch, tmp_path):
    code, out, err = launch(
        ["check_inputs=false", "evaluation.fid.coco_images_path=/elsewhere/images"], config_name="quickstart_sd"
    )
    assert code == 2
    assert "evaluation.fid.coco_images_path='/elsewhere/images': reference_data.images_output_dir writes" in err
