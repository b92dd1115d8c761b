"""Train-tokenizer step (custom datasets): a SentencePiece model, or a byte-level BPE with Hugging Face tokenizers.

    python3 -u -m nemo_launcher.jobs.data.train_tokenizer --config <job dir>/<run.name>_hydra.yaml

- tokenizer_library=sentencepiece: every key of train_tokenizer_args is passed to SentencePieceTrainer
  (the seed's spm_train options: input, input_format, model_prefix, model_type, vocab_size,
  character_coverage, unk_id, bos_id, eos_id, pad_id, ...). Writes <bpe_save_dir>/<model_prefix>.model/.vocab.
- tokenizer_library=huggingface: a GPT-2-style byte-level BPE of train_tokenizer_args.vocab_size (and
  min_frequency, default 2) with eod_token (default <|endoftext|>) as its special token. Writes
  tokenizer_model (a tokenizer.json) plus vocab.json and merges.txt in bpe_save_dir.

With train_tokenizer_args.input null the tokenizer learns from the texts of raw_dataset_files (json_key).
The model appears under its final name only when training finished; an existing one is kept.
"""
import json
import logging
import os
import shutil
import tempfile
from typing import Iterator, List

from .config import DataConfigError, StepConfig, run_step
from .custom_layout import plain_jsonl, raw_files
from .step_report import StepReport

log = logging.getLogger("data.train_tokenizer")


def _texts(files: List[str], key: str, scratch: str) -> Iterator[str]:
    for path in files:
        with open(plain_jsonl(path, scratch), "rb") as handle:
            for row in handle:
                try:
                    text = json.loads(row)[key]
                except (ValueError, KeyError, TypeError, IndexError):
                    continue  # the preprocess step reports malformed lines; training just leaves them out
                if isinstance(text, str) and text:
                    yield text


def train_sentencepiece(cfg: StepConfig, args: dict, model_path: str, save_dir: str) -> None:
    import sentencepiece

    prefix = args.get("model_prefix") or "custom_sp_tokenizer"
    expected = os.path.join(save_dir, prefix + ".model")
    if os.path.abspath(expected) != os.path.abspath(model_path):
        raise DataConfigError(f"data_preparation.tokenizer_model={model_path!r} must be <bpe_save_dir>/<model_prefix>.model "
                              f"({expected}) for SentencePiece, which names its output after model_prefix")
    options = {k: v for k, v in args.items() if v is not None and k != "model_prefix"}
    with tempfile.TemporaryDirectory(dir=save_dir) as work:
        options["model_prefix"] = os.path.join(work, prefix)
        if "input" not in options:
            options.pop("input_format", None)
            options["sentence_iterator"] = _texts(raw_files(cfg), cfg.text("json_key"), os.path.join(work, "raw"))
        sentencepiece.SentencePieceTrainer.train(**options)
        for suffix in (".vocab", ".model"):  # .model last: its presence means the pair is complete
            os.replace(os.path.join(work, prefix + suffix), os.path.join(save_dir, prefix + suffix))


def train_byte_level_bpe(cfg: StepConfig, args: dict, model_path: str, save_dir: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    ignored = sorted(set(args) - {"input", "input_format", "vocab_size", "min_frequency", "model_prefix"})
    if ignored:
        log.info("train_tokenizer_args %s are SentencePiece options; the byte-level BPE ignores them", ignored)
    if (args.get("input_format") or "text") != "text":
        raise DataConfigError("data_preparation.train_tokenizer_args.input_format: the byte-level BPE reads text files only")
    eod = cfg.get("eod_token", None) or "<|endoftext|>"
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=int(args.get("vocab_size") or 8000),
                                  min_frequency=int(args.get("min_frequency") or 2),
                                  special_tokens=[eod], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=bool(cfg.get("progress", True)))
    with tempfile.TemporaryDirectory(dir=save_dir) as work:
        if args.get("input"):
            tokenizer.train([args["input"]], trainer)
        else:
            tokenizer.train_from_iterator(_texts(raw_files(cfg), cfg.text("json_key"), os.path.join(work, "raw")),
                                          trainer)
        tokenizer.model.save(work)
        for name in ("vocab.json", "merges.txt"):
            os.replace(os.path.join(work, name), os.path.join(save_dir, name))
        temporary = os.path.join(work, "tokenizer.json")
        tokenizer.save(temporary)
        os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
        shutil.move(temporary, model_path)


TRAINERS = {"sentencepiece": train_sentencepiece, "huggingface": train_byte_level_bpe}


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("train_tokenizer", argv)
    report = StepReport("train_tokenizer", unit="tokenizer")
    if not cfg.flag("train_tokenizer"):
        log.info("train_tokenizer is false; nothing to do")
        return report
    library = cfg.choice("tokenizer_library", tuple(TRAINERS))
    model_path = cfg.text("tokenizer_model")
    if os.path.isfile(model_path):
        log.info("%s exists; kept (delete it to train again)", model_path)
        report.kept(library, output=model_path)
        return report
    args = dict(cfg.get("train_tokenizer_args") or {})
    save_dir = cfg.text("bpe_save_dir")
    os.makedirs(save_dir, exist_ok=True)
    TRAINERS[library](cfg, args, model_path, save_dir)
    log.info("trained %s tokenizer: %s", library, model_path)
    report.done(library, output=model_path)
    report.note("model", f"{model_path} ({library}, vocabulary {args.get('vocab_size') or 'default'})")
    return report


if __name__ == "__main__":
    run_step(main)
