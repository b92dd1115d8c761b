"""The sample corpus writer (nemo_launcher/jobs/common/sample_data.py): GPT-2's BPE files by default, the checkout's
2,048-token tiny BPE when asked, and a corpus tokenized with whichever it installed."""

import pytest

from tests.conftest import require_module

require_module("megatron.core")

from nemo_launcher.jobs.common import sample_data  # noqa: E402


def _documents(prefix):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    return [dataset[i].tolist() for i in range(len(dataset))]


def test_the_tiny_bpe_is_installed_and_tokenizes_the_corpus(tmp_path):
    vocab, merges = sample_data.tiny_bpe_files()
    prefix = sample_data.build_sample_data(tmp_path, max_files=1, bpe_files=(vocab, merges))
    assert (tmp_path / "bpe" / "vocab.json").read_bytes() == vocab.read_bytes()
    assert (tmp_path / "bpe" / "merges.txt").read_bytes() == merges.read_bytes()
    documents = _documents(prefix)
    assert len(documents) > 10
    # Every document ends with the tiny BPE's end-of-text id (2047, last, as 50256 is GPT-2's); no id goes beyond it.
    assert all(ids[-1] == 2047 and max(ids) == 2047 and 2047 not in ids[:-1] for ids in documents)


def test_gpt2_stays_the_default_and_replaces_the_tiny_files(tmp_path):
    sample_data.install_bpe(tmp_path / "bpe", sample_data.tiny_bpe_files())
    prefix = sample_data.build_sample_data(tmp_path, max_files=1)
    for installed, gpt2 in zip(("vocab.json", "merges.txt"), sample_data.gpt2_bpe_files()):
        assert (tmp_path / "bpe" / installed).read_bytes() == gpt2.read_bytes()
    documents = _documents(prefix)
    assert all(ids[-1] == 50256 for ids in documents) and max(max(ids[:-1]) for ids in documents) >= 2048


def test_the_command_line_installs_the_tiny_bpe_when_asked(tmp_path, capsys):
    assert sample_data.main(["--data-dir", str(tmp_path), "--tiny-bpe"]) == 0
    assert (tmp_path / "bpe" / "vocab.json").read_bytes() == sample_data.tiny_bpe_files()[0].read_bytes()
    assert (tmp_path / "tiny_pile" / "preprocessed" / f"{sample_data.PREFIX_NAME}.idx").is_file()
    assert "sample data: " in capsys.readouterr().out


def test_the_tiny_bpe_outside_a_checkout_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(sample_data, "TINY_BPE_DIR", tmp_path / "corpora" / "tiny_bpe")
    with pytest.raises(FileNotFoundError, match=r"corpora/tiny_bpe/vocab.json, .*merges.txt: the tiny BPE ships"):
        sample_data.tiny_bpe_files()
