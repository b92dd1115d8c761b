"""The job spec speaks no backend: `run.dependency` words map to Dependency kinds once, on the launch side; time
limits are durations; a backend refuses at validate() a dependency it cannot honour, in one line."""

from datetime import timedelta

import pytest

from nemo_launcher.launch.errors import ConfigError
from nemo_launcher.launch.job_spec import Dependency, Wait
from nemo_launcher.launch.pipeline import build_plan
from nemo_launcher.launch.stages.run_dependency import parse_run_dependency

from .conftest import compose_config

KEY = "training.run.dependency"


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, (Dependency.AFTER_SUCCESS, ())),
        ("singleton", (Dependency.AFTER_SUCCESS, (Wait(Dependency.SINGLETON),))),
        ("afterany, singleton", (Dependency.AFTER_ANY_END, (Wait(Dependency.SINGLETON),))),
        ("afternotok", (Dependency.AFTER_FAILURE, ())),
        ("aftercorr", (Dependency.AFTER_CORRESPONDING_ITEM, ())),
        (
            "afterok:12:13_4,after:9",
            (
                Dependency.AFTER_SUCCESS,
                (Wait(Dependency.AFTER_SUCCESS, ("12", "13_4")), Wait(Dependency.AFTER_START, ("9",))),
            ),
        ),
    ],
)
def test_the_seed_words_map_to_dependency_kinds(value, expected):
    assert parse_run_dependency(KEY, value) == expected


@pytest.mark.parametrize(
    "value", ["afterfoo", "afterok:", "afterok:abc", "singleton:3", "afterburstbuffer:5", "after:5+10"]
)
def test_unknown_dependency_words_are_one_line_config_errors(value):
    with pytest.raises(ConfigError) as error:
        parse_run_dependency(KEY, value)
    message = str(error.value)
    assert message.startswith(f"{KEY}={value!r}: use comma-separated items: singleton") and "\n" not in message


def test_the_time_limit_is_parsed_once_into_a_duration():
    cfg, choices = compose_config(["stages=[training]", "training=gpt3/5b", "training.run.time_limit=1-04:00:30"])
    (spec,) = build_plan(cfg, choices).jobs_by_stage[0]
    assert spec.spec.time_limit == timedelta(days=1, hours=4, seconds=30)


def test_array_steps_carry_items_and_a_parallelism_limit():
    cfg, choices = compose_config(["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile"])
    download, extract, preprocess = (job.spec for job in build_plan(cfg, choices).jobs_by_stage[0])
    assert download.array_items == tuple(range(30)) and download.array_limit == 30
    assert extract.after_previous is Dependency.AFTER_CORRESPONDING_ITEM
    assert download.waits == (Wait(Dependency.SINGLETON),)


@pytest.mark.parametrize("cluster_type", ["interactive", "bcp"])
def test_backends_running_here_refuse_waiting_on_any_end_and_outside_jobs(cluster_type):
    base = ["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", f"cluster_type={cluster_type}"]
    cfg, choices = compose_config(base + ["data_preparation.run.dependency=afterok:42"])
    with pytest.raises(ConfigError, match=r"^data_preparation.run.dependency='after_success:42': cluster_type="):
        build_plan(cfg, choices)
    # The stage's first job waits for nothing in the pipeline: how it would wait for one is moot.
    cfg, choices = compose_config(base + ["data_preparation.run.dependency=afterany"])
    assert build_plan(cfg, choices)
