"""The cluster section, processes per node against GPUs per node, and container mounts: every bad value is
refused before anything is written (exit 2, one line naming the key, the value and the fix)."""

import pytest
import yaml

from nemo_launcher.launch.cluster_settings import CLUSTER_SETTINGS
from nemo_launcher.launch.resolvers import REPO_ROOT

TRAINING = ["stages=[training]", "training=gpt3/5b"]
CONVERSION = ["stages=[conversion]", "conversion=gpt3/convert_gpt3"]
CONTAINER = ["container=registry/image:1"]

REFUSED = [
    # (overrides, words the one-line message must contain)
    (TRAINING + ["cluster.gpus_per_node=0"], ["cluster.gpus_per_node=0", "integer >= 1", "null"]),
    # The conversion config divides by gpus_per_node in a resolver: the cluster check must speak first.
    (["stages=[training,conversion]", "training=gpt3/5b", "cluster.gpus_per_node=0"], ["cluster.gpus_per_node=0"]),
    (TRAINING + ["cluster.gpus_per_node=-8"], ["cluster.gpus_per_node=-8"]),
    (TRAINING + ["cluster.gpus_per_node=eight"], ["cluster.gpus_per_node='eight'"]),
    (TRAINING + ["cluster.gpus_per_node=true"], ["cluster.gpus_per_node=True"]),
    (TRAINING + ["cluster.gpus_per_task=0"], ["cluster.gpus_per_task=0", "integer >= 1"]),
    (TRAINING + ["cluster.partition='batch nodes'"], ["cluster.partition='batch nodes'", "without spaces or commas"]),
    (TRAINING + ["cluster.partition='a,b'"], ["cluster.partition='a,b'", "without spaces or commas"]),
    (TRAINING + ["cluster.partition=''"], ["cluster.partition=''"]),
    (TRAINING + ["cluster.partition=7"], ["cluster.partition=7"]),
    (TRAINING + ["cluster.account='my account'"], ["cluster.account='my account'", "account name"]),
    (TRAINING + ["cluster.exclusive=1"], ["cluster.exclusive=1", "true", "false"]),
    (TRAINING + ["cluster.exclusive=yes"], ["cluster.exclusive='yes'"]),
    (TRAINING + ["cluster.overcommit=null"], ["cluster.overcommit=None", "true or false"]),
    (TRAINING + ["cluster.mem=-1"], ["cluster.mem=-1", "500G"]),
    (TRAINING + ["cluster.mem=true"], ["cluster.mem=True"]),
    (TRAINING + ["cluster.mem=1.5"], ["cluster.mem=1.5"]),
    (TRAINING + ["cluster.mem=500GB"], ["cluster.mem='500GB'", "500G"]),
    (TRAINING + ["cluster.mem=lots"], ["cluster.mem='lots'"]),
    (TRAINING + ["cluster.job_name_prefix=null"], ["cluster.job_name_prefix=None", '""']),
    (TRAINING + ["cluster.job_name_prefix='team/'"], ["cluster.job_name_prefix='team/'", "slashes"]),
    (TRAINING + ["cluster.job_name_prefix='team\\\\'"], ["cluster.job_name_prefix='team\\\\'", "backslashes"]),
    (TRAINING + ["cluster.srun_args='--mpi=pmix'"], ["cluster.srun_args='--mpi=pmix'", "[--mpi=pmix]"]),
    (TRAINING + ["cluster.srun_args=[--cpu-bind,3]"], ["cluster.srun_args=['--cpu-bind', 3]"]),
    (TRAINING + ["cluster.signal_seconds_before_limit=0"], ["cluster.signal_seconds_before_limit=0", ">= 1"]),
    (TRAINING + ["cluster.signal_seconds_before_limit=null"], ["cluster.signal_seconds_before_limit=None"]),
    # More processes on a node than it has GPUs: training (trainer.devices) and a stage with run.ntasks_per_node.
    # trainer.devices follows cluster.gpus_per_node unless set: the user's case sets both.
    (
        TRAINING + ["training.trainer.devices=8", "cluster.gpus_per_node=4"],
        [
            "training.trainer.devices=8",
            "starts 8 processes per node, but cluster.gpus_per_node=4",
            "training.trainer.devices must equal cluster.gpus_per_node (one process per GPU); set one to the other",
        ],
    ),
    (
        CONVERSION
        + [
            "conversion.model.tensor_model_parallel_size=8",
            "conversion.run.nodes=1",
            "conversion.run.ntasks_per_node=8",
            "cluster.gpus_per_node=4",
        ],
        [
            "conversion.run.ntasks_per_node=8",
            "cluster.gpus_per_node=4",
            "must be at most cluster.gpus_per_node",
        ],
    ),
    # Container mounts: pyxis splits on commas, and each entry is /path, /src:/dst or /src:/dst:ro|rw.
    (TRAINING + CONTAINER + ["container_mounts=['/data,/lustre']"], ["container_mounts='/data,/lustre'", "no commas"]),
    (TRAINING + CONTAINER + ["container_mounts=[/a:/b:/c]"], ["container_mounts='/a:/b:/c'", "/src:/dst:ro|rw"]),
    (TRAINING + CONTAINER + ["container_mounts=[/a:/b:/c:ro]"], ["container_mounts='/a:/b:/c:ro'"]),
    (TRAINING + CONTAINER + ["container_mounts=[/a:/b:rx]"], ["container_mounts='/a:/b:rx'"]),
    (TRAINING + CONTAINER + ["container_mounts=[data]"], ["container_mounts='data'", "/abs/path"]),
    (TRAINING + CONTAINER + ["container_mounts=[/data:mnt]"], ["container_mounts='/data:mnt'"]),
    (TRAINING + CONTAINER + ["container_mounts=[:/mnt]"], ["container_mounts=':/mnt'"]),
    (TRAINING + CONTAINER + ["container_mounts=['']"], ["container_mounts=''"]),
    # Without a container the mounts are not used, but a malformed entry is still a mistake.
    (TRAINING + ["container_mounts=[relative/dir]"], ["container_mounts='relative/dir'"]),
]


@pytest.mark.parametrize(
    "overrides,words", REFUSED, ids=[" ".join(case[0][2:]) or " ".join(case[0]) for case in REFUSED]
)
def test_bad_cluster_setting_is_refused_before_writing(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


def test_launcher_path_with_a_comma_is_refused_only_with_a_container(launch, tmp_path):
    results = tmp_path / "results"
    data_dir = tmp_path / "data,v2"
    code, out, err = launch(TRAINING + CONTAINER + [f"data_dir='{data_dir}'"], results=results)
    assert code == 2 and err.count("\n") == 1, err
    assert f"data_dir='{data_dir}'" in err and "pyxis splits mounts" in err
    assert not results.exists()
    # Without a container nothing is mounted, and the comma is an ordinary character of the path.
    code, out, err = launch(TRAINING + [f"data_dir='{data_dir}'"], results=results)
    assert code == 0, err


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["cluster.mem=0"], "#SBATCH --mem=0\n"),
        (["cluster.mem=500"], "#SBATCH --mem=500G\n"),
        (["cluster.mem=500G"], "#SBATCH --mem=500G\n"),
        (["cluster.mem='64000'"], "#SBATCH --mem=64000\n"),
        (["cluster.partition=batch", "cluster.account=llm-team"], "#SBATCH --partition=batch\n"),
        # No GPUs asked for: nothing to compare with.
        (["cluster.gpus_per_node=null", "training.trainer.devices=8"], "#SBATCH --ntasks-per-node=8\n"),
        # Fewer processes than GPUs is allowed.
        (["cluster.gpus_per_node=16", "training.trainer.devices=8"], "#SBATCH --gpus-per-node=16\n"),
        (["cluster.job_name_prefix=''"], "#SBATCH --job-name=gpt3_5b\n"),
        (["cluster.srun_args=['--mpi=pmix']"], "srun --kill-on-bad-exit=1 --mpi=pmix "),
    ],
)
def test_good_cluster_settings_render(overrides, expected, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(TRAINING + overrides, results=results)
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    assert expected in script.read_text()


def test_fewer_processes_than_gpus_are_allowed_for_conversion_and_small_training(launch, tmp_path):
    # Conversion of a TP=2 checkpoint starts 2 processes on an 8-GPU node; tiny training starts 1.
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[training,conversion]", "training=gpt3/tiny", "conversion.model.tensor_model_parallel_size=2"],
        results=results,
    )
    assert code == 0, err
    scripts = {p.parent.name: p.read_text() for p in results.rglob("*_submission.sh")}
    assert (
        "#SBATCH --ntasks-per-node=1\n" in scripts["gpt3_tiny"]
        and "#SBATCH --gpus-per-node=8\n" in scripts["gpt3_tiny"]
    )
    assert "#SBATCH --ntasks-per-node=2\n" in scripts["convert_nemo"]


def test_cpu_jobs_are_not_compared_with_gpus(launch, tmp_path):
    # Export asks for no GPUs, so a single-GPU cluster setting does not concern it.
    results = tmp_path / "results"
    code, out, err = launch(["stages=[export]", "export=gpt3/export_gpt3", "cluster.gpus_per_node=1"], results=results)
    assert code == 0, err


def test_good_mounts_reach_pyxis_in_order(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        TRAINING + CONTAINER + ["container_mounts=[/lustre,/scratch:/mnt/scratch,/ro:/mnt/ro:ro,/rw:/rw:rw,null]"],
        results=results,
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    mounts = script.read_text().split("--container-mounts=", 1)[1].split(" ", 1)[0]
    assert mounts.split(",")[3:] == ["/lustre:/lustre", "/scratch:/mnt/scratch", "/ro:/mnt/ro:ro", "/rw:/rw:rw"]


def test_every_key_of_the_cluster_config_has_its_check():
    shipped = yaml.safe_load((REPO_ROOT / "conf" / "cluster" / "bcm.yaml").read_text())
    assert sorted(CLUSTER_SETTINGS) == sorted(shipped)
