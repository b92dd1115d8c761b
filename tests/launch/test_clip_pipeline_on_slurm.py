"""The tiny CLIP pipeline on a real Slurm with default paths only: the CLIP quick start's stages submitted with
dependencies. Data preparation is the WebDataset pipeline as Slurm jobs (array jobs where the seed has them, each
array task waiting for its own task of the step before: aftercorr), then training, zero-shot evaluation, similarity
and ONNX export."""

import json

from .conftest import plan_rows
from .test_data_preparation_stage import _wait_for_arrays
from .test_training_on_slurm import SLURM_CPU

# The quick start trains 150 steps to score well (tests/test_quickstart_vision.py checks it); here the pipeline's
# wiring is under test, and 20 steps still write the .nemo every later stage reads.
SHORT_TRAINING = [
    "training.trainer.max_steps=20",
    "training.trainer.val_check_interval=20",
    "training.trainer.log_every_n_steps=10",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=20",
]


def test_tiny_clip_pipeline_with_array_jobs(slurm_cluster, launch, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    code, out, err = launch(
        ["cluster_type=bcm", f"data_dir={data}", *SHORT_TRAINING, *SLURM_CPU],
        debug=False,
        results=results,
        config_name="quickstart_clip",
    )
    assert code == 0, err
    rows = plan_rows(out)
    stages = [row[0] for row in rows]
    data_rows = [row for row in rows if row[0] == "data_preparation"]
    assert stages == ["data_preparation"] * len(data_rows) + ["training", "evaluation", "fw_inference", "export"]
    arrays = [row for row in data_rows if row[7] != "-"]
    assert len(arrays) >= 2, out  # download_images, reorganize_tar, precache_encodings run as arrays
    assert any(row[3].startswith("aftercorr:") for row in arrays), out
    ids = [row[2] for row in rows]
    _wait_for_arrays(ids[: len(data_rows)], timeout_s=400)
    states = [slurm_cluster.wait(job_id, timeout_s=600) for job_id in ids[len(data_rows) :]]
    assert states == ["COMPLETED"] * 4, states

    run_dir = results / "clip_tiny"
    assert (run_dir / "results" / "checkpoints" / "nemo_clip.nemo").exists()
    (scores,) = (run_dir / "eval_tiny_shapes_zeroshot_clip_tiny" / "results").glob("*_results.json")
    assert json.loads(scores.read_text())["images"] == 120
    similarity = json.loads((run_dir / "fw_inference_clip_similarity" / "similarity.json").read_text())
    assert len(similarity["texts"]) == 4
    report = json.loads((run_dir / "export_clip" / "export_report.json").read_text())
    assert max(report["max_abs_difference"].values()) <= 1e-4
