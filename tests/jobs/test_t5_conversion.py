"""T5 and mT5 conversion: the .nemo archive of a T5Model (standalone.py) and the conversion job.

- a randomly initialised tiny T5 (both styles) saved into a .nemo and loaded back computes the same logits, with
  its WordPiece vocabulary (T5) or SentencePiece model (mT5) packed in;
"""
import tarfile

import pytest

from tests.conftest import require_module

torch = require_module("torch")

from nemo_launcher.jobs.t5 import standalone  # noqa: E402

from .data_support import train_wordpiece_vocab  # noqa: E402
from .t5_models import (STYLES, megatron_logits, model_section, random_model, sample_batch, sentencepiece_tokenizer,  # noqa: E402
                        wordpiece_tokenizer)

TOLERANCE = 1e-5  # max |logit difference| in fp32


@pytest.fixture(scope="module")
def t5_vocab(tmp_path_factory):
    """A cased WordPiece vocab.txt learned from the tiny Pile (T5's tokenizer)."""
    return train_wordpiece_vocab(tmp_path_factory.mktemp("t5_vocab") / "vocab.txt", lower_case=False, vocab_size=800)


@pytest.fixture(scope="module")
def mt5_model(tmp_path_factory):
    """A SentencePiece model shaped like mT5's released one: pad 0, eos 1, unk 2, no bos, no sentinels."""
    import sentencepiece

    from .data_support import tiny_pile_texts

    folder = tmp_path_factory.mktemp("mt5_sp")
    text = folder / "text.txt"
    text.write_text("\n".join(tiny_pile_texts()[:120]), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / "mt5"), vocab_size=500,
                                             pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    return str(folder / "mt5.model")


def _tokenizer_section(kind, t5_vocab, mt5_model):
    return wordpiece_tokenizer(t5_vocab) if kind == "t5" else sentencepiece_tokenizer(mt5_model)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", ("t5", "mt5"))
def test_nemo_round_trip_gives_identical_logits(tmp_path, t5_vocab, mt5_model, kind, style):
    section = model_section(style, _tokenizer_section(kind, t5_vocab, mt5_model))
    vocab_size = 1024
    model = random_model(section, vocab_size)
    path = standalone.save_t5_nemo(tmp_path / f"megatron_{kind}.nemo", section, model)

    packed = "tokenizer/vocab.txt" if kind == "t5" else "tokenizer/mt5.model"
    with tarfile.open(path) as archive:
        assert set(archive.getnames()) == {"model_config.yaml", "model_weights.pt", packed}
    config, state = standalone.load_t5_nemo(path)
    source = t5_vocab if kind == "t5" else mt5_model
    packed_key = "vocab_file" if kind == "t5" else "model"
    assert open(config["tokenizer"][packed_key], "rb").read() == open(source, "rb").read()
    for key, value in model.state_dict().items():
        if not key.endswith("_extra_state"):
            assert torch.equal(state[key], value), key

    loaded, tokenizer = standalone.load_t5_from_nemo(path)
    assert len(tokenizer.additional_special_tokens_ids) == 10  # the sentinels come back with the vocabulary
    batch = sample_batch(vocab_size)
    expected = megatron_logits(model, *batch)
    assert (megatron_logits(loaded, *batch) - expected).abs().max().item() == 0.0
    assert expected.std() > 0.1  # a real function of the weights, not a constant
