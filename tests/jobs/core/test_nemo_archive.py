"""The .nemo archive: round trips of config, weights and tokenizer files, and the refusals that protect them."""

import tarfile

import pytest

from tests.conftest import require_module

torch = require_module("torch")

from nemo_launcher.jobs.common.config import JobConfigError  # noqa: E402
from nemo_launcher.jobs.core import nemo_archive  # noqa: E402
from nemo_launcher.jobs.gpt import inference  # noqa: E402
from nemo_launcher.jobs.gpt.shards import gpt_shard_layout  # noqa: E402
from tests.jobs.data_support import gpt2_files  # noqa: E402,F401  (fixture)
from tests.jobs.gpt_models import STYLES, megatron_logits, model_section, random_model  # noqa: E402


@pytest.mark.parametrize("style", STYLES)
def test_round_trip_gives_identical_logits(tmp_path, gpt2_files, style):  # noqa: F811
    section = model_section(style, *gpt2_files)
    model = random_model(section)
    path = nemo_archive.save_nemo(tmp_path / "m.nemo", section, model.state_dict())

    config, state_dict = nemo_archive.load_nemo(path, extract_dir=tmp_path / "tok")
    assert not any(key.endswith("_extra_state") for key in state_dict)
    for key, value in model.state_dict().items():
        if not key.endswith("_extra_state"):
            assert torch.equal(state_dict[key], value), key
    # Tokenizer keys point at extracted copies, byte for byte the files packed.
    for key, source in (("vocab_file", gpt2_files[0]), ("merge_file", gpt2_files[1])):
        assert config["tokenizer"][key].startswith(str(tmp_path / "tok"))
        assert open(config["tokenizer"][key], "rb").read() == open(source, "rb").read()

    loaded, tokenizer = inference.load_gpt_from_nemo(path)
    tokens = torch.tensor([tokenizer.encode("Hello world, the quick brown fox jumps")])
    assert torch.equal(megatron_logits(loaded, tokens), megatron_logits(model, tokens))
    assert tokenizer.eod == 50256


def test_archive_members_and_packed_tokenizer_paths(tmp_path, gpt2_files):  # noqa: F811
    section = model_section("classic", *gpt2_files, tensor_model_parallel_size=2)
    path = nemo_archive.save_nemo(
        tmp_path / "m.nemo", section, random_model(model_section("classic", *gpt2_files)).state_dict()
    )
    with tarfile.open(path) as archive:
        names = set(archive.getnames())
        stored = nemo_archive.yaml.safe_load(archive.extractfile("model_config.yaml"))
    assert names == {"model_config.yaml", "model_weights.pt", "tokenizer/vocab.json", "tokenizer/merges.txt"}
    assert stored["tokenizer"]["vocab_file"] == "nemo:tokenizer/vocab.json"
    # One full state dict is a TP=1 PP=1 archive whatever the config said.
    assert (stored["tensor_model_parallel_size"], stored["pipeline_model_parallel_size"]) == (1, 1)
    assert not list(tmp_path.glob(".*")), "staging files left behind"


def test_sharded_archive(tmp_path, gpt2_files):  # noqa: F811
    section = model_section("classic", *gpt2_files, tensor_model_parallel_size=2)
    shards = {}
    for rank in range(2):
        shards[(rank, 0)] = tmp_path / f"shard{rank}.pt"
        torch.save({"w": torch.full((2,), float(rank))}, shards[(rank, 0)])
    path = nemo_archive.write_nemo(tmp_path / "m.nemo", section, shards)
    with tarfile.open(path) as archive:
        assert "tp_rank_01_pp_rank_000/model_weights.pt" in archive.getnames()
    assert torch.equal(nemo_archive.load_nemo_shard(path, 1, 0)["w"], torch.ones(2))
    # Merging needs to know how megatron split each parameter; an unknown one is refused, not guessed.
    with pytest.raises(ValueError, match="w: no rule says how megatron-core splits"):
        nemo_archive.load_nemo(path, shard_layout=gpt_shard_layout)
    with pytest.raises(ValueError, match="needs"):
        nemo_archive.write_nemo(tmp_path / "bad.nemo", section, {(0, 0): shards[(0, 0)]})


def test_missing_tokenizer_file_names_the_key(tmp_path, gpt2_files):  # noqa: F811
    section = model_section("classic", gpt2_files[0], str(tmp_path / "absent.txt"))
    with pytest.raises(JobConfigError, match=r"model.tokenizer.merge_file: .*absent.txt does not exist"):
        nemo_archive.save_nemo(tmp_path / "m.nemo", section, {"w": torch.zeros(1)})
    assert not (tmp_path / "m.nemo").exists()


def test_not_an_archive(tmp_path):
    (tmp_path / "x.nemo").write_text("hello")
    with pytest.raises(JobConfigError, match="not a .nemo archive"):
        nemo_archive.load_nemo(tmp_path / "x.nemo")
    with pytest.raises(JobConfigError, match="no such .nemo file"):
        nemo_archive.load_nemo(tmp_path / "y.nemo")
