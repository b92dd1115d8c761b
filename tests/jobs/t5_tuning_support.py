"""A tiny T5 .nemo and a tiny question-answering task made here, and runs of the T5 fine-tuning program on them.

    nemo = tiny_t5_nemo(folder)                # random 2+2-layer T5 with a WordPiece vocabulary, saved by standalone.py
    files = write_task(folder)                 # {"train_src": ..., "train_tgt": ..., "val_src": ..., ...}
    config = finetune_config(work, nemo, files, ["trainer.max_steps=12"])   # what the launcher writes (t5/custom_task)

The task: "question: what colour is the <thing>? context: the <thing> is <colour> ." -> "<colour>", every word
in the vocabulary, so a few steps of a tiny model learn it.
"""

import itertools
import random
from collections.abc import Sequence
from pathlib import Path

from .data_support import train_wordpiece_vocab
from .t5_models import model_section, random_model, wordpiece_tokenizer

THINGS = [
    "house",
    "car",
    "river",
    "book",
    "door",
    "tree",
    "table",
    "road",
    "stone",
    "ship",
    "wall",
    "horse",
    "garden",
    "window",
    "bridge",
    "church",
]
COLOURS = ["red", "blue", "green", "black", "white", "brown"]
NEMO_VOCAB = 1024  # padded embedding rows


def tiny_t5_nemo(folder: Path, **overrides) -> str:
    from nemo_launcher.jobs.t5.standalone import save_t5_nemo

    vocab = train_wordpiece_vocab(folder / "vocab.txt", lower_case=False, vocab_size=800, extra=THINGS + COLOURS)
    section = model_section(
        "family",
        wordpiece_tokenizer(vocab),
        max_position_embeddings=64,
        encoder_seq_length=64,
        init_method_std=0.02,
        **overrides,
    )
    section["data"]["seq_length"] = 64
    return str(save_t5_nemo(folder / "megatron_t5.nemo", section, random_model(section, NEMO_VOCAB)))


def qa_pairs(seed: int, count: int):
    pairs = list(itertools.product(THINGS, COLOURS))
    random.Random(seed).shuffle(pairs)
    return [
        (f"question: what colour is the {thing} ? context: the {thing} is {colour} .", colour)
        for thing, colour in pairs[:count]
    ]


def write_task(folder: Path, train: int = 64, validation: int = 8) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, seed, count in (("train", 1, train), ("val", 2, validation)):
        pairs = qa_pairs(seed, count)
        for side, index in (("src", 0), ("tgt", 1)):
            path = folder / f"{split}_{side}.txt"
            path.write_text("".join(pair[index] + "\n" for pair in pairs), encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    return files


FAST = [
    "trainer.devices=1",
    "trainer.accelerator=cpu",
    "trainer.precision=32",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=1",
    "model.global_batch_size=4",
    "model.micro_batch_size=2",
    "model.optim.lr=3.0e-3",
    "model.optim.sched.warmup_steps=1",
    "model.optim.sched.min_lr=1.0e-4",
    "model.data.train_ds.max_src_seq_length=32",
    "model.data.train_ds.max_tgt_seq_length=6",
]


def finetune_config(
    work: Path, nemo: str, files: dict[str, str], overrides: Sequence[str] = (), choice: str = "t5/custom_task"
) -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    data = [
        "run.model_train_name=t5_tiny",
        f"model.restore_from_path={nemo}",
        f"model.data.train_ds.src_file_name={files['train_src']}",
        f"model.data.train_ds.tgt_file_name={files['train_tgt']}",
        f"model.data.validation_ds.src_file_name={files['val_src']}",
        f"model.data.validation_ds.tgt_file_name={files['val_tgt']}",
    ]
    return write_stage_config(
        work / "finetune.yaml",
        "fine_tuning",
        choice,
        data_dir=work / "data",
        base_results_dir=work / "results",
        overrides=[*FAST, *data, *overrides],
    )


def results_dir(work: Path) -> Path:
    """exp_manager.explicit_log_dir of t5/custom_task under `work`."""
    return work / "results" / "t5_tiny" / "custom_task" / "results"


def tuned_nemo(work: Path) -> Path:
    return results_dir(work) / "checkpoints" / "megatron_t5_custom_task.nemo"
