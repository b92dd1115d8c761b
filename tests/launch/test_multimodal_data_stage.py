"""data_preparation=multimodal/*: the sub-stages in the seed's order, their arrays and chains, the resume settings, the
refused mistakes, and the tiny pipeline on a real Slurm."""

import subprocess

import pytest

from .conftest import plan_rows
from .test_data_preparation_stage import _scripts, _wait_for_arrays


def _plan(launch, tmp_path, *overrides, choice="multimodal/tiny_shapes"):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[data_preparation]", f"data_preparation={choice}", *overrides], results=results)
    assert code == 0, err
    return plan_rows(out), _scripts(results)


def test_tiny_shapes_chains_arrays_per_task_where_a_task_reads_one_task(launch, tmp_path):
    rows, scripts = _plan(launch, tmp_path)
    steps = [
        "generate_shapes",
        "download_parquet",
        "download_images",
        "reorganize_tar",
        "precache_encodings",
        "generate_wdinfo",
    ]
    assert [row[1] for row in rows] == [f"nemo-megatron-tiny_shapes_{step}" for step in steps]
    # reorganize_tar needs every download's count (the whole array); precache task i reads what reorganize task i
    # wrote (same partition: aftercorr); wdinfo reads every tar.
    assert [row[3] for row in rows] == [
        "singleton",
        "afterok:DRYRUN-1,singleton",
        "afterok:DRYRUN-2,singleton",
        "afterok:DRYRUN-3,singleton",
        "aftercorr:DRYRUN-4,singleton",
        "afterok:DRYRUN-5,singleton",
    ]
    # Before the parquet files exist: num_parquets_downloaded (2) x parquet_subpartitions (2) download tasks.
    arrays = {
        step: [line for line in scripts[step].splitlines() if line.startswith("#SBATCH --array=")] for step in steps
    }
    assert arrays == {
        "generate_shapes": [],
        "download_parquet": [],
        "download_images": ["#SBATCH --array=0-3%4"],
        "reorganize_tar": ["#SBATCH --array=0-1%2"],
        "precache_encodings": ["#SBATCH --array=0-1%2"],
        "generate_wdinfo": [],
    }
    for step, text in scripts.items():
        assert f"-m nemo_launcher.jobs.multimodal.{step} --config " in text
        assert ("#SBATCH --gpus-per-node=8" in text) == (step == "precache_encodings"), step
        subprocess.run(["bash", "-n", "-c", text], check=True)


def test_download_multimodal_runs_the_seeds_five_sub_stages(launch, tmp_path):
    rows, scripts = _plan(
        launch, tmp_path, "data_preparation.dataset_repo_id=org/pairs", choice="multimodal/download_multimodal"
    )
    assert [row[1].rpartition("download_multimodal_")[2] for row in rows] == [
        "download_parquet",
        "download_images",
        "reorganize_tar",
        "precache_encodings",
        "generate_wdinfo",
    ]
    # precache_encodings (4 tasks) cuts another partition than reorganize_tar (2): it waits for all of it.
    assert rows[3][3] == "afterok:DRYRUN-3,singleton"
    assert "#SBATCH --array=0-2%3\n" in scripts["download_images"]  # 1 parquet file x 3 sub-partitions
    assert "#SBATCH --array=0-3%4\n" in scripts["precache_encodings"]
    assert "#SBATCH --ntasks-per-node=8\n" in scripts["precache_encodings"]


def test_parquet_files_found_at_launch_set_the_download_array(launch, tmp_path):
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    for number in range(7):
        (parquet / f"p{number}.parquet").write_bytes(b"")
    rows, scripts = _plan(
        launch,
        tmp_path,
        "data_preparation.generate_shapes.enable=false",
        "data_preparation.download_parquet.enable=false",
        f"data_preparation.download_images.input_dir={parquet}",
    )
    assert "#SBATCH --array=0-6%7\n" in scripts["download_images"]


@pytest.mark.parametrize(
    "settings, array",
    [
        # 100 tasks were launched and 50-99 did not finish: rerun those, partitioned as before.
        (["precache_encodings.node_array_size='50-99'", "override_task_count=100"], "#SBATCH --array=50-99%50"),
        # task 67 of 100 failed: one job plays task 67.
        (["precache_encodings.node_array_size=1", "override_task_id=67", "override_task_count=100"], None),
    ],
)
def test_resume_settings_rerun_tasks_of_an_earlier_partition(settings, array, launch, tmp_path):
    only_precache = [
        f"data_preparation.{name}.enable=false"
        for name in ("generate_shapes", "download_parquet", "download_images", "reorganize_tar", "generate_wdinfo")
    ]
    rows, scripts = _plan(launch, tmp_path, *only_precache, *[f"data_preparation.{s}" for s in settings])
    lines = [line for line in scripts["precache_encodings"].splitlines() if line.startswith("#SBATCH --array")]
    assert lines == ([array] if array else [])


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["override_task_id=3"], ["data_preparation.override_task_id=3", "override_task_count"]),
        (["override_task_id=5", "override_task_count=4"], ["override_task_id=5", "0-3"]),
        (
            ["precache_encodings.node_array_size='50-99'"],
            ["precache_encodings.node_array_size='50-99'", "override_task_count"],
        ),
        (["precache_encodings.node_array_size='90-120'", "override_task_count=100"], ["task 120"]),
        (
            ["override_task_id=1", "override_task_count=2"],
            ["reorganize_tar.node_array_size=2", "reorganize_tar.enable=false"],
        ),
        (["+download_images.img2dataset_additional_arguments.retrys=2"], ["retrys", "did you mean retries"]),
        (
            ["download_images.img2dataset_additional_arguments.resize_mode=stretch"],
            ["resize_mode='stretch'", "center_crop"],
        ),
        (["reorganize_tar.file_ext_in_tar=[jpg]"], ["file_ext_in_tar", "with their dot"]),
        (["download_images.download_num_processes=0"], ["download_num_processes=0", "-1"]),
        (["dataset_repo_url=s3://bucket/x"], ["dataset_repo_url='s3://bucket/x'", "file://"]),
        (
            [
                f"{name}.enable=false"
                for name in (
                    "generate_shapes",
                    "download_parquet",
                    "download_images",
                    "reorganize_tar",
                    "precache_encodings",
                    "generate_wdinfo",
                )
            ],
            ["every sub-stage is disabled"],
        ),
    ],
)
def test_mistakes_are_refused_naming_the_key(overrides, words, launch, tmp_path):
    results = tmp_path / "r"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=multimodal/tiny_shapes",
            *[f"+data_preparation.{o[1:]}" if o.startswith("+") else f"data_preparation.{o}" for o in overrides],
        ],
        results=results,
    )
    assert code == 2, err
    assert all(word in err for word in words), err
    assert len(err.strip().splitlines()) == 1, err
    assert not results.exists()


def test_tiny_shapes_on_real_slurm(slurm_cluster, launch, tmp_path):
    """generate_shapes -> download_parquet -> download_images (4 array tasks) -> reorganize_tar (2) -> precache (2,
    aftercorr) -> generate_wdinfo, on the local cluster."""
    results, data = tmp_path / "results", tmp_path / "data"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=multimodal/tiny_shapes",
            f"data_dir={data}",
            "data_preparation.progress=false",
            "cluster.gpus_per_node=null",
            "cluster.exclusive=false",
        ],
        debug=False,
        results=results,
    )
    assert code == 0, err
    ids = [row[2] for row in plan_rows(out)]
    assert len(ids) == 6
    _wait_for_arrays(ids, timeout_s=600)
    states = "".join(
        subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        for job_id in ids
    )
    assert states.count("JobState=COMPLETED") == 11, states  # 3 single jobs + 4 + 2 + 2 array tasks
    import pickle

    with open(data / "tiny_shapes" / "wdinfo.pkl", "rb") as handle:
        info = pickle.load(handle)
    assert info["total_key_count"] + sum(info["partial_tar_files"].values()) == 480
