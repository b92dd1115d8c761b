"""t5/tiny_pile and bert/tiny_pile through their step programs: the files training reads, a trained WordPiece
vocabulary with BERT's and T5's specials, sentence datasets equal to the reference, the same bytes on every run."""

import pathlib

import pytest

from nemo_launcher.jobs.common.tokenizer import TokenizerSpec
from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer
from nemo_launcher.jobs.data import download, extract, preprocess, train_tokenizer
from tests.jobs.data_support import reference_sentence_dataset, same_files, tiny_pile_texts

from .test_data_steps import resolved

STEPS = (download, extract, train_tokenizer, preprocess)
CASES = {  # config -> (folder under data_dir, tokenizer type, sentinels in the vocabulary)
    "t5/tiny_pile": ("tiny_pile_t5", "BertWordPieceCase", 100),
    "bert/tiny_pile": ("tiny_pile_bert", "BertWordPieceLowerCase", 0),
}


def _run(choice: str, folder: pathlib.Path, monkeypatch) -> pathlib.Path:
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    folder.mkdir(parents=True, exist_ok=True)
    config = str(resolved(choice, folder, "progress=false"))
    for step in STEPS:
        step.main(["--config", config])
    return folder / "data" / CASES[choice][0]


@pytest.mark.parametrize("choice", sorted(CASES))
def test_tiny_pile_for_t5_and_bert(choice, tmp_path, monkeypatch):
    name, tokenizer_type, sentinels = CASES[choice]
    data = _run(choice, tmp_path / "a", monkeypatch)
    vocab = data / "bpe" / "vocab.txt"  # the path conf/training/{t5,bert}/tiny.yaml reads
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    assert tokens[:7] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]"]
    assert tokens[7 : 7 + sentinels] == [f"<extra_id_{i}>" for i in range(sentinels)] and len(tokens) <= 4000
    assert ("The" in tokens) == (tokenizer_type == "BertWordPieceCase")  # cased for T5, lower case for BERT
    outputs = sorted((data / "preprocessed").glob("*"))
    assert [p.name for p in outputs] == [
        f"{name}_{n:02d}_text_sentence.{ext}" for n in range(3) for ext in ("bin", "idx")
    ]
    tokenizer = load_tokenizer(TokenizerSpec("megatron", tokenizer_type, vocab_file=str(vocab)))
    reference_sentence_dataset(
        str(data / "extracted" / "01.jsonl"), str(tmp_path / "ref"), tokenizer, max_sentence_tokens=512
    )
    assert same_files(tmp_path / "ref.bin", data / "preprocessed" / f"{name}_01_text_sentence.bin")
    assert same_files(tmp_path / "ref.idx", data / "preprocessed" / f"{name}_01_text_sentence.idx")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    datasets = [IndexedDataset(str(p.with_suffix(""))) for p in outputs[1::2]]
    assert sum(len(d.document_indices) - 1 for d in datasets) == len(tiny_pile_texts())
    assert sum(len(d) for d in datasets) > 4 * len(tiny_pile_texts())  # several sentences per document

    # Another run from scratch: the same vocabulary and datasets, byte for byte.
    again = _run(choice, tmp_path / "b", monkeypatch)
    for path in [vocab] + outputs:
        assert same_files(path, again / path.relative_to(data)), path
    # A rerun in place trains and tokenizes nothing again.
    stamps = [p.stat().st_mtime_ns for p in [vocab] + outputs]
    _run(choice, tmp_path / "a", monkeypatch)
    assert [p.stat().st_mtime_ns for p in [vocab] + outputs] == stamps
