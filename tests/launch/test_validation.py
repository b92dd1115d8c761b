"""Validation leaves earlier results alone; registries and resolvers. The table of refused mistakes is
test_refusals.py."""

import pytest

from nemo_launcher.launch.resolvers import RESOLVERS

BASE = ["stages=[training]", "training=gpt3/5b"]


def test_validation_failure_keeps_earlier_results(launch, tmp_path):
    results = tmp_path / "results"
    assert launch(BASE, results=results)[0] == 0
    before = {p: p.read_bytes() for p in results.rglob("*") if p.is_file()}
    assert launch(BASE + ["training.model.tensor_model_parallel_size=3"], results=results)[0] == 2
    assert {p: p.read_bytes() for p in results.rglob("*") if p.is_file()} == before


def test_every_registered_stage_imports_and_names_its_group():
    from nemo_launcher.launch.stages import STAGES, stage_class

    for kind in STAGES:
        assert stage_class(kind).kind == kind


def test_resolvers():
    assert RESOLVERS["multiply"](2, 1) == 2
    assert RESOLVERS["multiply"]("4", 768) == 3072
    assert RESOLVERS["divide_ceil"](9, 8) == 2
    assert RESOLVERS["divide_floor"](3, 2) == 1


def test_unknown_override_key_fails_at_compose_time():
    from hydra.errors import ConfigCompositionException

    from .conftest import compose_config

    with pytest.raises(ConfigCompositionException, match="traning"):
        compose_config(BASE + ["training.traning.max_steps=1"])
