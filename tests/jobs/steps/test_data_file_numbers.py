"""file_numbers parsing (shared by the launch side and the job side) and the choice of items per task."""

import pytest

from nemo_launcher.contract.file_numbers import FileNumbersError, compress_ranges, parse_file_numbers, slurm_array
from nemo_launcher.jobs.steps.config import DataConfigError, StepConfig, this_task_items, worker_count


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("0-29", list(range(30))),
        ("0", [0]),
        ("0,3,5-7", [0, 3, 5, 6, 7]),
        (" 5 - 7 , 0 ", [0, 5, 6, 7]),
        ("3,1-2,2", [1, 2, 3]),
        (4, [4]),
    ],
)
def test_parse(spec, expected):
    assert parse_file_numbers(spec) == expected


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("", "expected numbers"),
        ("1-", "'1-' is not a number or a range"),
        ("a", "'a' is not a number"),
        ("1,,2", "'' is not a number"),
        ("7-5", "ends before it starts"),
        ("-1", "'-1' is not a number"),
        ("1-3-5", "'1-3-5'"),
        ("0:29", "'0:29'"),
        (-2, "start at 0"),
        (True, "expected numbers"),
        (None, "expected numbers"),
        (1.5, "expected numbers"),
    ],
)
def test_malformed_specs_name_the_key_and_the_item(spec, fragment):
    with pytest.raises(FileNumbersError) as error:
        parse_file_numbers(spec, key="data_preparation.file_numbers")
    assert fragment in str(error.value)
    assert str(error.value).startswith("data_preparation.file_numbers=")


def test_slurm_array_round_trips():
    for spec in ("0-29", "0,3,5-7", "2", "1,3,5", "0-2,4-6,9"):
        numbers = parse_file_numbers(spec)
        assert parse_file_numbers(compress_ranges(numbers)) == numbers
    assert slurm_array(parse_file_numbers("0,3,5-7"), max_parallel=30) == "0,3,5-7%30"
    assert slurm_array([5, 4, 3]) == "3-5"
    with pytest.raises(FileNumbersError):
        slurm_array([1], max_parallel=0)


def test_launch_module_needs_no_third_party_import():
    import subprocess
    import sys

    code = (
        "import sys; import nemo_launcher.contract.file_numbers; "
        "heavy = {'torch', 'numpy', 'tokenizers', 'megatron'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_array_task_handles_exactly_its_file_number():
    numbers = [0, 3, 5, 6, 7]
    assert this_task_items(numbers, {"SLURM_ARRAY_TASK_ID": "5"}) == [5]
    with pytest.raises(DataConfigError, match="SLURM_ARRAY_TASK_ID='4'"):
        this_task_items(numbers, {"SLURM_ARRAY_TASK_ID": "4"})


def test_without_an_array_every_item_or_a_rank_share():
    numbers = list(range(7))
    assert this_task_items(numbers, {}) == numbers
    shares = [this_task_items(numbers, {"RANK": str(r), "WORLD_SIZE": "3"}) for r in range(3)]
    assert sorted(sum(shares, [])) == numbers and shares[0] == [0, 3, 6]
    assert this_task_items(numbers, {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}) == [1, 3, 5]


def test_workers_split_among_processes_on_a_node():
    cfg = StepConfig({"run": {"workers_per_node": 8}})
    assert worker_count(cfg, {}) == 8
    assert worker_count(cfg, {"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}) == 4
    assert worker_count(StepConfig({"run": {"workers_per_node": None}}), {}) >= 1
    with pytest.raises(DataConfigError, match="run.workers_per_node"):
        worker_count(StepConfig({"run": {"workers_per_node": 0}}), {})


def test_config_errors_name_the_full_key():
    cfg = StepConfig({"file_numbers": "3-1", "run": {}}, "x.yaml")
    with pytest.raises(DataConfigError, match=r"data_preparation.file_numbers='3-1'"):
        cfg.file_numbers()
    with pytest.raises(DataConfigError, match="data_preparation.run.node_array_size is missing from x.yaml"):
        cfg.positive_int("run.node_array_size")
