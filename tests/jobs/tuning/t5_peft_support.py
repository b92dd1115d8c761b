"""Tiny frozen T5 and mT5 bases for the prompt-learning, adapter and IA3 tests, and prompt-learning jsonl about them.

    nemo = sharp_t5 (fixture)            # a random 2+2-layer T5 .nemo (WordPiece) with large weights
    nemo = sharp_mt5 (fixture)           # the same shape with a SentencePiece vocabulary, as mT5 has
    path = prompt_lines(folder / "colors.jsonl", "colors")      # questions whose answer is named in the context

Large weights (init std 0.2) give logits over a wide range, so a frozen copy can be steered by a method and its
answers depend on the method's tensors.
"""

import json

import pytest

from tests.jobs.t5_tuning_support import COLOURS, NEMO_VOCAB, THINGS


def _save(folder, tokenizer: dict) -> str:
    from nemo_launcher.jobs.t5.standalone import save_t5_nemo
    from tests.jobs.t5_models import model_section, random_model

    section = model_section("family", tokenizer, max_position_embeddings=64, encoder_seq_length=64)
    section["data"]["seq_length"] = 64
    return str(save_t5_nemo(folder / "megatron_t5.nemo", section, random_model(section, NEMO_VOCAB)))


@pytest.fixture(scope="session")
def sharp_t5(tmp_path_factory):
    from tests.jobs.data_support import train_wordpiece_vocab
    from tests.jobs.t5_models import wordpiece_tokenizer

    folder = tmp_path_factory.mktemp("sharp_t5")
    vocab = train_wordpiece_vocab(folder / "vocab.txt", lower_case=False, vocab_size=800, extra=THINGS + COLOURS)
    return _save(folder, wordpiece_tokenizer(vocab))


@pytest.fixture(scope="session")
def sharp_mt5(tmp_path_factory):
    """With a SentencePiece model shaped like mT5's (pad 0, eos 1, unk 2, no bos) trained on the task's words."""
    import sentencepiece

    from tests.jobs.data_support import tiny_pile_texts
    from tests.jobs.t5_models import sentencepiece_tokenizer

    folder = tmp_path_factory.mktemp("sharp_mt5")
    text = folder / "text.txt"
    task = [
        f"the {thing} is {colour} . what is the {thing} ? context question" for thing in THINGS for colour in COLOURS
    ]
    text.write_text("\n".join(tiny_pile_texts()[:120] + task), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(folder / "mt5"),
        vocab_size=400,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return _save(folder, sentencepiece_tokenizer(folder / "mt5.model"))


def prompt_lines(path, task: str, values=COLOURS, count: int = 48) -> str:
    """`count` questions whose answer (one of `values`) is named in the context; "answers" lists it twice cased."""
    with open(path, "w") as handle:
        for i in range(count):
            thing, value = THINGS[i % len(THINGS)], values[(i * 7) % len(values)]
            handle.write(
                json.dumps(
                    {
                        "taskname": task,
                        "context": f"the {thing} is {value} .",
                        "question": f"what is the {thing} ?",
                        "answer": value,
                        "answers": [value, value.capitalize()],
                    }
                )
                + "\n"
            )
    return str(path)
