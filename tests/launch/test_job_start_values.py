"""A node count Base Command Platform knows only when the job starts (`trainer.num_nodes=$NGC_ARRAY_SIZE`, as the
seed prints it): accepted on cluster_type=bcp and left to the job, refused elsewhere; every rule that does not
need the number is still checked at launch, and the plan lists the counts the config accepts."""

import pytest
import yaml

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.job_start_values import (
    AtJobStart,
    job_start_reference,
    resolve_job_start_values,
)
from nemo_launcher.jobs.common.config import load_resolved_config
from nemo_launcher.launch.shell import quote

BCP = ["cluster_type=bcp", "stages=[training]"]
WAITING = "training.trainer.num_nodes=$NGC_ARRAY_SIZE"


@pytest.mark.parametrize("written", ["$NGC_ARRAY_SIZE", "${NGC_ARRAY_SIZE}"])
def test_both_spellings_wait_for_the_job_and_reach_its_shell(written, launch, tmp_path):
    code, out, err = launch([*BCP, "training=gpt3/5b", f"training.trainer.num_nodes={written}"])
    assert code == 0, err
    (script,) = (tmp_path / "results").rglob("*_submission.sh")
    text = script.read_text()
    assert 'bcprun --nnodes "${NGC_ARRAY_SIZE}" --npernode 8' in text
    assert ': "${NGC_ARRAY_SIZE:?' in text  # outside an NGC job the script stops at once, saying why
    (config,) = (tmp_path / "results").rglob("*_hydra.yaml")
    assert yaml.safe_load(config.read_text())["trainer"]["num_nodes"] == "$NGC_ARRAY_SIZE"
    row = next(line for line in out.splitlines() if line.startswith("training "))
    assert "$NGC_ARRAY_SIZE" in row.split()
    # 5b: its global batch of 2048 sequences is a multiple of micro 4 x data-parallel (8 GPUs per node x nodes, TP 1)
    # only for powers of two up to 64 nodes.
    assert "this config accepts NGC_ARRAY_SIZE = 1, 2, 4, 8, 16, 32, 64\n" in out, out


# (overrides, words of the one-line refusal)
REFUSALS = [
    (
        ["cluster_type=bcm", "stages=[training]", "training=gpt3/5b", WAITING],
        ["$NGC_ARRAY_SIZE exists only inside a Base Command Platform job", "training.trainer.num_nodes=2"],
    ),
    (
        ["cluster_type=interactive", "stages=[training]", "training=gpt3/tiny", WAITING],
        ["training.trainer.num_nodes='$NGC_ARRAY_SIZE'", "on cluster_type=interactive give the node count"],
    ),
    (
        [*BCP, "training=gpt3/5b", "training.model.num_layers=$NGC_ARRAY_SIZE"],
        ["training.model.num_layers='$NGC_ARRAY_SIZE'", "only a job's node count (trainer.num_nodes or run.nodes)"],
    ),
    (
        [*BCP, "training=t5/220m", "training.trainer.devices=${NGC_ARRAY_SIZE}"],
        ["training.trainer.devices='$NGC_ARRAY_SIZE'", "can wait for the job start"],
    ),
    # A rule that does not involve the node count fails for every count: refused now, with its own message.
    (
        [*BCP, "training=gpt3/5b", WAITING, "training.model.num_attention_heads=7"],
        ["training.model.hidden_size=4096", "num_attention_heads (7)"],
    ),
    # Rules that involve it, failing for every count tried: named with the count that shows it.
    (
        [*BCP, "training=gpt3/5b", WAITING, "training.model.global_batch_size=7"],
        ["training.trainer.num_nodes='$NGC_ARRAY_SIZE': no node count from 1 to 2048", "global_batch_size=7"],
    ),
    (
        [*BCP, "training=bert/110m", "training.trainer.num_nodes=$NGC_ARRAY_SIZE", "training.model.micro_batch_size=0"],
        ["training.model.micro_batch_size=0"],
    ),
]


@pytest.mark.parametrize("overrides, words", REFUSALS)
def test_waiting_node_counts_are_refused_where_no_job_could_run(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert all(word in err for word in words), err
    assert not results.exists()


def test_the_reference_is_the_whole_value_and_a_known_variable():
    assert job_start_reference("$NGC_ARRAY_SIZE") == AtJobStart("NGC_ARRAY_SIZE")
    assert job_start_reference("${NGC_ARRAY_SIZE}") == AtJobStart("NGC_ARRAY_SIZE")
    for other in ("$HOME", "$NGC_ARRAY_SIZE/2", "4", 4, None, "/data/$NGC_ARRAY_SIZE"):
        assert job_start_reference(other) is None, other
    assert quote(AtJobStart("NGC_ARRAY_SIZE")) == '"${NGC_ARRAY_SIZE}"'


def test_the_job_binds_the_number_its_environment_holds(tmp_path):
    config = tmp_path / "job_hydra.yaml"
    config.write_text("trainer:\n  num_nodes: $NGC_ARRAY_SIZE\n  devices: 8\nname: x\n")
    assert load_resolved_config_with(config, {"NGC_ARRAY_SIZE": "16"})["trainer"] == {"num_nodes": 16, "devices": 8}
    for environ, words in (
        ({}, "NGC_ARRAY_SIZE is not set in this job's environment"),
        ({"NGC_ARRAY_SIZE": "four"}, "NGC_ARRAY_SIZE is 'four', not a positive integer"),
        ({"NGC_ARRAY_SIZE": "0"}, "NGC_ARRAY_SIZE is '0', not a positive integer"),
    ):
        with pytest.raises(JobConfigError, match=words):
            load_resolved_config_with(config, environ)


def load_resolved_config_with(config, environ):
    """load_resolved_config as a job started with `environ` runs it."""
    import os

    saved = os.environ.pop("NGC_ARRAY_SIZE", None)
    os.environ.update(environ)
    try:
        return load_resolved_config(config)
    finally:
        os.environ.pop("NGC_ARRAY_SIZE", None)
        if saved is not None:
            os.environ["NGC_ARRAY_SIZE"] = saved


def test_resolving_leaves_every_other_value_alone():
    section = {"a": ["$NGC_ARRAY_SIZE", "$HOME"], "b": {"c": "${NGC_ARRAY_SIZE}"}, "d": 3}
    assert resolve_job_start_values(section, {"NGC_ARRAY_SIZE": "2"}) == {"a": [2, "$HOME"], "b": {"c": 2}, "d": 3}
