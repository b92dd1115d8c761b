"""Train-tokenizer step: a SentencePiece model, a byte-level BPE or a BERT WordPiece vocabulary, from the dataset's
text.

    python3 -u -m nemo_launcher.jobs.data.train_tokenizer --config <job dir>/<run.name>_hydra.yaml

- tokenizer_library=sentencepiece: every key of train_tokenizer_args is passed to SentencePieceTrainer
  (the seed's spm_train options: input, input_format, model_prefix, model_type, vocab_size,
  character_coverage, unk_id, bos_id, eos_id, pad_id, control_symbols, ...); sentinel_tokens: N adds T5's
  sentinels <extra_id_0> ... <extra_id_N-1> as control symbols. Writes <model_prefix>.model/.vocab beside
  tokenizer_model, which must be named <model_prefix>.model.
- tokenizer_library=huggingface: a GPT-2-style byte-level BPE of train_tokenizer_args.vocab_size (and
  min_frequency, default 2) with eod_token (default <|endoftext|>) as its special token. Writes
  tokenizer_model (a tokenizer.json) plus vocab.json and merges.txt in bpe_save_dir (else beside it).
- tokenizer_library=megatron with tokenizer_type BertWordPieceCase / BertWordPieceLowerCase: a WordPiece
  vocabulary of about vocab_size tokens learned from text normalized as that type encodes it (train_wordpiece),
  written to vocab_file (vocab.txt, one token a line). It starts with [PAD] [UNK] [CLS] [SEP] [MASK] [BOS] [EOS]
  (ids 0-6: BERT's and T5's datasets need them) and, with train_tokenizer_args.sentinel_tokens: N, T5's sentinels
  <extra_id_0> ... <extra_id_N-1>.

The text is the dataset's: raw_dataset_files (custom_dataset), the extracted shards of file_numbers (pile), the
downloaded files of the selected languages (mc4); a SentencePiece `input` file replaces it. The trained files
appear under their final names only when training finished; an existing tokenizer is kept.
"""

import gzip
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator

import zstandard

from ..common.errors import DataPrepError
from ..common.tokenizer import WORDPIECE_TYPES
from ..steps.config import DataConfigError, StepConfig, run_step
from ..steps.step_report import StepReport

log = logging.getLogger("data.train_tokenizer")
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]"]


def _open_text(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".zst"):
        reader = zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(open(path, "rb"), closefd=True)
        return io.BufferedReader(reader, 16 << 20)  # the stream reader has no readline of its own
    return open(path, "rb")


def iter_texts(files: Iterable[str], key: str) -> Iterator[str]:
    """The documents of jsonl files (plain, .gz or .zst), in order; lines without a text under `key` are left out
    (the preprocess step reports them)."""
    for path in files:
        with _open_text(path) as handle:
            for row in handle:
                try:
                    text = json.loads(row)[key]
                except (ValueError, KeyError, TypeError, IndexError):
                    continue
                if isinstance(text, str) and text:
                    yield text


def dataset_text_files(cfg: StepConfig) -> list[str]:
    """The files whose text the tokenizer learns from, for the configured dataset."""
    dataset = cfg.bound.dataset
    if dataset == "custom_dataset":
        from .custom_layout import raw_files

        return raw_files(cfg)
    if dataset == "pile":
        from .pile_layout import PileLayout

        layout = PileLayout(cfg)
        files = [layout.shard(number).extracted for number in cfg.bound.shard_numbers()]
        step = "download and extract steps (data_preparation.download_the_pile=True)"
    else:
        from .mc4_layout import Mc4Layout

        layout = Mc4Layout(cfg)
        files = [layout.local_path(item) for item in layout.selected_files()]
        step = "prepare and download steps (data_preparation.download_mc4=True)"
    missing = [path for path in files if not os.path.isfile(path)]
    if missing:
        raise DataPrepError(
            f"the tokenizer learns from {len(files)} files and {len(missing)} are missing "
            f"(first: {missing[0]}); run the {step}"
        )
    return files


def train_sentencepiece(cfg: StepConfig, args: dict, model_path: str) -> None:
    import sentencepiece

    save_dir, name = os.path.split(os.path.abspath(model_path))
    stem = name[: -len(".model")] if name.endswith(".model") else None
    prefix = args.get("model_prefix") or stem
    if stem is None or prefix != stem:
        raise DataConfigError(
            f"data_preparation.tokenizer_model={model_path!r} must be <dir>/<model_prefix>.model "
            f"(model_prefix={prefix!r}) for SentencePiece, which names its output after model_prefix"
        )
    os.makedirs(save_dir, exist_ok=True)
    options = {k: v for k, v in args.items() if v is not None and k not in ("model_prefix", "sentinel_tokens")}
    options.setdefault("minloglevel", 1)  # warnings and errors; its per-iteration lines would fill the job log
    sentinels = [f"<extra_id_{i}>" for i in range(int(args.get("sentinel_tokens") or 0))]
    if sentinels:
        given = options.get("control_symbols") or []
        given = given.split(",") if isinstance(given, str) else list(given)
        options["control_symbols"] = [symbol for symbol in given if symbol] + sentinels
    if "input" in options:
        options["input"] = ",".join(os.path.abspath(path) for path in str(options["input"]).split(","))
    else:
        options.pop("input_format", None)
        options["sentence_iterator"] = iter_texts(dataset_text_files(cfg), cfg.bound.json_key)
    sentencepiece.set_random_generator_seed(1234)  # sampling (input_sentence_size) gives the same lines every run
    # The model records its model_prefix: a bare name, written in a fixed folder, keeps the .model byte-stable.
    work = os.path.join(save_dir, f".{prefix}.training")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    here = os.getcwd()
    try:
        os.chdir(work)
        sentencepiece.SentencePieceTrainer.train(model_prefix=prefix, **options)
    finally:
        os.chdir(here)
    for suffix in (".vocab", ".model"):  # .model last: its presence means the pair is complete
        os.replace(os.path.join(work, prefix + suffix), os.path.join(save_dir, prefix + suffix))
    shutil.rmtree(work, ignore_errors=True)


def _words_per_line(texts: Iterable[str], normalize, pre_tokenize, words: int = 64) -> Iterator[str]:
    """Text as the WordPiece type sees it (normalized, split at whitespace and punctuation), in lines of `words`
    words: SentencePiece skips lines over 4192 bytes."""
    for text in texts:
        pieces = [piece for piece, _ in pre_tokenize(normalize(text))]
        for first in range(0, len(pieces), words):
            yield " ".join(pieces[first : first + words])


def train_wordpiece(cfg: StepConfig, args: dict, vocab_path: str) -> None:
    """A WordPiece vocabulary learned deterministically: SentencePiece's BPE on the words the type would see,
    converted (a piece that starts a word, "▁abc", becomes "abc"; one inside a word, "abc", becomes "##abc"; each
    character gets both forms, so no word of the training text encodes to [UNK]).

    Hugging Face's WordPieceTrainer was not used: it breaks ties between equally frequent pairs in hash order,
    so two runs on the same text give different vocabularies, and different datasets after them.
    """
    import sentencepiece
    from tokenizers import normalizers, pre_tokenizers

    ignored = sorted(set(args) - {"vocab_size", "sentinel_tokens", "input_sentence_size"})
    if ignored:
        log.info("train_tokenizer_args %s do not apply to WordPiece; ignored", ignored)
    specials = WORDPIECE_SPECIALS + [f"<extra_id_{i}>" for i in range(int(args.get("sentinel_tokens") or 0))]
    vocab_size = int(args.get("vocab_size") or 30000)
    normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=None,
        lowercase=WORDPIECE_TYPES[cfg.bound.tokenizer_type],
    )
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    lines = _words_per_line(
        iter_texts(dataset_text_files(cfg), cfg.bound.json_key),
        normalizer.normalize_str,
        pre_tokenizer.pre_tokenize_str,
    )
    model = io.BytesIO()
    sentencepiece.set_random_generator_seed(1234)  # sampling of input_sentence_size lines, if it happens
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=lines,
        model_writer=model,
        model_type="bpe",
        vocab_size=max(8, vocab_size - len(specials)),
        character_coverage=1.0,
        normalization_rule_name="identity",
        split_digits=False,
        hard_vocab_limit=False,
        input_sentence_size=int(args.get("input_sentence_size") or 2_000_000),
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_unknown(i) or processor.is_control(i))
    ]
    characters = [piece for piece in pieces if len(piece) == 1 and piece != "▁"]
    learned = [piece[1:] if piece.startswith("▁") else "##" + piece for piece in pieces if len(piece) > 1]
    vocabulary = list(dict.fromkeys(specials + [form for c in characters for form in (c, "##" + c)] + learned))
    vocabulary = vocabulary[: max(vocab_size, len(specials) + 2 * len(characters))]  # the least frequent merges go
    os.makedirs(os.path.dirname(os.path.abspath(vocab_path)), exist_ok=True)
    temporary = f"{vocab_path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as out:
        out.writelines(token + "\n" for token in vocabulary)
    os.replace(temporary, vocab_path)


def train_byte_level_bpe(cfg: StepConfig, args: dict, model_path: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    ignored = sorted(set(args) - {"input", "input_format", "vocab_size", "min_frequency", "model_prefix"})
    if ignored:
        log.info("train_tokenizer_args %s are SentencePiece options; the byte-level BPE ignores them", ignored)
    if (args.get("input_format") or "text") != "text":
        raise DataConfigError(
            "data_preparation.train_tokenizer_args.input_format: the byte-level BPE reads text files only"
        )
    eod = cfg.bound.eod_token or "<|endoftext|>"
    # Only custom_dataset names a folder for the trained files; pile and mc4 write them beside the model.
    save_dir = getattr(cfg.bound, "bpe_save_dir", None) or os.path.dirname(os.path.abspath(model_path))
    os.makedirs(save_dir, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(args.get("vocab_size") or 8000),
        min_frequency=int(args.get("min_frequency") or 2),
        special_tokens=[eod],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=cfg.bound.progress,
    )
    with tempfile.TemporaryDirectory(dir=save_dir) as work:
        if args.get("input"):
            tokenizer.train([args["input"]], trainer)
        else:
            tokenizer.train_from_iterator(iter_texts(dataset_text_files(cfg), cfg.bound.json_key), trainer)
        tokenizer.model.save(work)
        for name in ("vocab.json", "merges.txt"):
            os.replace(os.path.join(work, name), os.path.join(save_dir, name))
        temporary = os.path.join(work, "tokenizer.json")
        tokenizer.save(temporary)
        os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
        shutil.move(temporary, model_path)


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("train_tokenizer", argv)
    report = StepReport("train_tokenizer", unit="tokenizer")
    section = cfg.bound
    if not section.train_tokenizer:
        log.info("train_tokenizer is false; nothing to do")
        return report
    # The schema refused what cannot be trained (GPT-2's BPE is downloaded) and a tokenizer without its file.
    tokenizer = section.tokenizer_files()
    library = tokenizer["library"]
    if library == "megatron":
        output, train = tokenizer["vocab_file"], train_wordpiece
    else:
        output = tokenizer["model"]
        train = train_sentencepiece if library == "sentencepiece" else train_byte_level_bpe
    if os.path.isfile(output):
        log.info("%s exists; kept (delete it to train again)", output)
        report.kept(library, output=output)
        return report
    args = dict(section.train_tokenizer_args)
    train(cfg, args, output)
    log.info("trained %s tokenizer: %s", library, output)
    report.done(library, output=output)
    report.note("model", f"{output} ({tokenizer['type'] or library}, vocabulary {args.get('vocab_size') or 'default'})")
    return report


if __name__ == "__main__":
    run_step(main)
