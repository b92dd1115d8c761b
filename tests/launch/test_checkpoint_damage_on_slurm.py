"""A damaged newest checkpoint under a training submitted to the real Slurm: the session's GPT pipeline run
(`gpt_slurm_pipeline`: 10 steps on two nodes, saved at 5 and 10) copied into a new results folder, its step-10 damaged
(a truncated shard that rank 1, on the other node, wrote and checks, and a lost .metadata), and
`stages=[training,conversion]` submitted on it as a user would. The training warns once naming both files, resumes
from step-5 and saves step-10 again; the conversion after it converts that one: the pipeline completes."""

import shutil

from .conftest import plan_rows
from .slurm_pipelines import TINY_TRAINING
from .test_training_on_slurm import SLURM_CPU


def _truncate_rank_1_shard(step_dir) -> str:
    shard = step_dir / "__1_0.distcp"
    saved = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:1024])
    return f"{shard}: size 1024 instead of {saved} bytes"


def _lose_metadata(step_dir) -> str:
    (step_dir / ".metadata").unlink()
    return f"{step_dir / '.metadata'}: missing"


def test_the_job_resumes_from_the_checkpoint_before_a_damaged_one_and_the_pipeline_completes(
    slurm_cluster, gpt_slurm_pipeline, launch, tmp_path
):
    results = tmp_path / "results"
    run = results / "gpt3_tiny" / "results"
    trained = gpt_slurm_pipeline.results / "gpt3_tiny" / "results" / "checkpoints"
    for step in ("step-5", "step-10"):
        shutil.copytree(trained / step, run / "checkpoints" / step)
    # Both faults in one checkpoint, one submission (a Slurm job here costs ~25 s): each is named on its own.
    truncated, lost = (
        _truncate_rank_1_shard(run / "checkpoints" / "step-10"),
        _lose_metadata(run / "checkpoints" / "step-10"),
    )

    code, out, err = launch(
        [
            "stages=[training,conversion]",
            "training=gpt3/tiny",
            f"data_dir={gpt_slurm_pipeline.data}",
            *TINY_TRAINING,
            *SLURM_CPU,
        ],
        debug=False,
        results=results,
    )
    assert code == 0, err
    rows = plan_rows(out)
    assert [row[0] for row in rows] == ["training", "conversion"]
    training, conversion = rows[0][2], rows[1][2]
    assert [slurm_cluster.wait(job, timeout_s=300) for job in (training, conversion)] == ["COMPLETED", "COMPLETED"]

    log = results / "gpt3_tiny" / f"log-nemo-megatron-gpt3_tiny_{training}_attempt0"
    output = log.with_suffix(".out").read_text() + log.with_suffix(".err").read_text()
    warnings = [line for line in output.splitlines() if " is damaged " in line]
    assert len(warnings) == 1, output[-3000:]
    # Sorted by file name: .metadata (checked by rank 0), then rank 1's shard (checked by rank 1, on the other node).
    assert (
        f"checkpoint step-10 is damaged ({lost}; {truncated}); set aside as step-10.damaged, resuming from step-5"
        in warnings[0]
    )
    assert f"resuming from {run / 'checkpoints' / 'step-5'}" in output and "Traceback" not in output
    assert "training finished at step=10 of 10" in output
    assert (run / "checkpoints" / "step-10" / "COMPLETE").is_file() and (
        run / "checkpoints" / "step-10.damaged"
    ).is_dir()
    assert (results / "gpt3_tiny" / "convert_nemo" / "results" / "megatron_gpt.nemo").is_file()
