"""Bad input is refused before anything is written: exit code 2, one line naming the key, the value and the fix."""
import pytest

from nemo_launcher.launch.resolvers import RESOLVERS

BASE = ["stages=[training]", "training=gpt3/5b"]

CASES = [
    # (overrides, words the message must contain)
    (["stages=[trainin]"], ["stages", "trainin", "known stages", "training"]),
    (["stages=[training,fine_tuning]"], ["fine_tuning", "null", "fine_tuning=<choice>"]),
    (["cluster_type=slurm"], ["cluster_type", "slurm", "bcm, bcp, interactive"]),
    (["training.model.tensor_model_parallel_size=3"], ["TP(3) x PP(1) = 3", "nodes(16) x devices(8) = 128"]),
    (["training.model.tensor_model_parallel_size=8", "training.model.num_attention_heads=4"], ["num_attention_heads", "4", "TP(8)"]),
    (["training.model.pipeline_model_parallel_size=32"], ["num_layers", "24", "PP(32)"]),
    (["training.model.global_batch_size=1000"], ["global_batch_size", "1000", "micro_batch_size(4) x data-parallel size(128) = 512"]),
    (["cluster_type=interactive"], ["nodes", "16", "interactive", "1 node"]),
    (["training.run.name=???"], ["training.run.name", "???", "mandatory"]),
    (["training.trainer.max_steps=???"], ["training.trainer.max_steps", "mandatory"]),
    (["container_mounts=/data"], ["container_mounts", "/data", "must be a list"]),
    (["training.run.dependency=afterfoo"], ["training.run.dependency", "afterfoo", "singleton"]),
    (["training.model.rampup_batch_size=[512,256,1000]"], ["rampup_batch_size", "multiples", "512"]),
    (["stages=[bcp_test]"], ["unknown stage"]),
    (["numa_mapping.mode=fastest"], ["numa_mapping.mode", "fastest", "unique_contiguous"]),
    (["cluster_type=bcp", "stages=[training,training]"], ["stages", "each stage once"]),
]


@pytest.mark.parametrize("overrides,words", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_config_is_refused_before_writing(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(BASE + overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


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
