"""load_tokenizer for BERT, T5 and mT5: the special token ids, sentinels and inv_vocab megatron-core's BERT and T5
datasets read, built from vocab.txt or a SentencePiece model, and the same ids data preparation writes."""

import pytest

from nemo_launcher.jobs.common.config import JobConfigError
from nemo_launcher.jobs.common.tokenizer import MaskingTokenizer, TokenizerSpec, load_tokenizer
from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_data_tokenizer
from tests.jobs.data_support import TRICKY_TEXTS, tiny_pile_texts, train_wordpiece_vocab


def _bert_style_vocab(tmp_path):
    """The layout of Google's vocab.txt: [PAD], [unused...], [UNK] [CLS] [SEP] [MASK], then pieces; no [BOS]/[EOS]."""
    trained = train_wordpiece_vocab(tmp_path / "trained.txt", lower_case=False)
    pieces = [line for line in open(trained, encoding="utf-8").read().splitlines() if not line.startswith("[")]
    lines = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + pieces
    path = tmp_path / "vocab.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path), len(lines)


def test_wordpiece_for_bert_has_bert_ids_and_appends_bos_eos(tmp_path):
    vocab, size = _bert_style_vocab(tmp_path)
    tok = load_tokenizer("megatron", "BertWordPieceCase", vocab_file=vocab)
    assert isinstance(tok, MaskingTokenizer)
    assert (tok.pad, tok.cls, tok.sep, tok.mask) == (0, 101, 102, 103)
    assert (tok.bos, tok.eos, tok.vocab_size) == (size, size + 1, size + 2)  # Megatron-LM appends [BOS], [EOS]
    assert tok.inv_vocab[size] == "[BOS]" and len(tok.inv_vocab) == tok.vocab_size
    assert tok.additional_special_tokens_ids == [] and tok.eod == tok.sep
    assert tok.pad not in [v for k, v in tok.special_tokens_dict.items() if k != "pad_token"]
    assert tok.decode(tok.encode("Hello World.") + [tok.bos]) == "Hello World. [BOS]"


def test_wordpiece_for_t5_appends_sentinels_in_order(tmp_path):
    vocab, size = _bert_style_vocab(tmp_path)
    tok = load_tokenizer("megatron", "BertWordPieceCase", vocab_file=vocab, num_sentinel_tokens=100)
    assert tok.additional_special_tokens_ids == list(range(size + 2, size + 102))
    assert tok.inv_vocab[size + 2] == "<extra_id_0>" and tok.vocab_size == size + 102
    assert tok.unique_identifiers["num_sentinel_tokens"] == 100


def test_a_vocab_that_carries_the_specials_appends_nothing(tmp_path):
    """The tiny configs' trained vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] [BOS] [EOS] <extra_id_0..99> first."""
    extra = ["[BOS]", "[EOS]"] + [f"<extra_id_{i}>" for i in range(100)]
    vocab = train_wordpiece_vocab(tmp_path / "vocab.txt", lower_case=True, extra=extra)
    size = len(open(vocab, encoding="utf-8").read().splitlines())
    tok = load_tokenizer("megatron", "BertWordPieceLowerCase", vocab_file=vocab, num_sentinel_tokens=100)
    assert (tok.pad, tok.cls, tok.sep, tok.mask, tok.bos, tok.eos) == (0, 2, 3, 4, 5, 6)
    assert tok.additional_special_tokens_ids == list(range(7, 107)) and tok.vocab_size == size


def test_training_and_data_preparation_encode_alike(tmp_path):
    vocab = train_wordpiece_vocab(tmp_path / "vocab.txt", lower_case=True)
    training = load_tokenizer("megatron", "BertWordPieceLowerCase", vocab_file=vocab)
    data = load_data_tokenizer(TokenizerSpec("megatron", "BertWordPieceLowerCase", vocab_file=vocab))
    for text in tiny_pile_texts()[:50] + TRICKY_TEXTS:
        assert training.encode(text) == data.encode(text)


def test_wordpiece_vocab_without_bert_specials_is_refused(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\nworld\n")
    with pytest.raises(JobConfigError, match=r"model.tokenizer.vocab_file: .* has no \[CLS\], \[SEP\], \[MASK\]"):
        load_tokenizer("megatron", "BertWordPieceCase", vocab_file=str(tmp_path / "vocab.txt"))
    with pytest.raises(JobConfigError, match="num_sentinel_tokens"):
        load_tokenizer("megatron", "BertWordPieceCase", vocab_file=str(tmp_path / "vocab.txt"), num_sentinel_tokens=-1)


def _sentencepiece(tmp_path, name, **options):
    import sentencepiece

    text = tmp_path / "text.txt"
    text.write_text("\n".join(tiny_pile_texts()[:120]), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / name), vocab_size=600, minloglevel=2, **options
    )
    return str(tmp_path / f"{name}.model")


def test_mt5_style_model_gets_sentinels_at_the_top_and_missing_specials_after(tmp_path):
    """mT5's released model: pad 0, eos 1, unk 2, no bos and no <extra_id_N> pieces."""
    model = _sentencepiece(tmp_path, "mt5", pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    tok = load_tokenizer("sentencepiece", model=model, num_sentinel_tokens=100)
    assert tok.additional_special_tokens_ids[0] == 699 and tok.additional_special_tokens_ids[-1] == 600
    assert tok.inv_vocab[699] == "<extra_id_0>"
    assert (tok.pad, tok.eos, tok.eod) == (0, 1, 1)
    assert [tok.inv_vocab[i] for i in (tok.cls, tok.sep, tok.mask, tok.bos)] == ["<cls>", "<sep>", "<mask>", "<bos>"]
    assert sorted((tok.cls, tok.sep, tok.mask, tok.bos)) == [700, 701, 702, 703] and tok.vocab_size == 704
    assert tok.decode(tok.encode("the Licensee") + [tok.bos]) == "the Licensee"
    with pytest.raises(JobConfigError, match="sentencepiece_legacy=true"):
        load_tokenizer("sentencepiece", model=model, num_sentinel_tokens=100, sentencepiece_legacy=False)


def test_a_model_with_its_own_specials_and_sentinels_is_used_as_is(tmp_path):
    """What mt5/tiny_mc4 trains: bos 3, <cls> <sep> <mask> and the sentinels as control symbols."""
    symbols = ["<cls>", "<sep>", "<mask>"] + [f"<extra_id_{i}>" for i in range(100)]
    model = _sentencepiece(tmp_path, "own", pad_id=0, eos_id=1, unk_id=2, bos_id=3, control_symbols=symbols)
    tok = load_tokenizer("sentencepiece", model=model, num_sentinel_tokens=100, sentencepiece_legacy=False)
    assert (tok.pad, tok.eos, tok.bos, tok.cls, tok.sep, tok.mask) == (0, 1, 3, 4, 5, 6)
    assert tok.additional_special_tokens_ids == list(range(7, 107)) and tok.vocab_size == 600
    gpt = load_tokenizer("sentencepiece", model=model)  # without sentinels: the GPT tokenizer, as before
    assert not isinstance(gpt, MaskingTokenizer) and gpt.pad == gpt.eod == 1
