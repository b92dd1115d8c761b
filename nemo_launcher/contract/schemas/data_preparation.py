"""Schema of the resolved `data_preparation` section (conf/data_preparation/*/*.yaml), one per `dataset`.

    cfg = DataPreparation.from_dict(section)     # PileConfig, Mc4Config or CustomDatasetConfig, by `dataset`
    cfg.steps()                                  # [StepPlan(name="download", items=[0, 1, ...], ...), ...]

`pile`: download (.jsonl.zst) -> extract (.jsonl) -> train_tokenizer (optional) -> preprocess (.bin/.idx),
the per-shard steps Slurm arrays over file_numbers. `mc4`: prepare -> download (array over nodes) ->
setup_preprocess -> train_tokenizer (optional) -> preprocess (array over nodes, workers_per_node tasks each).
`custom_dataset`: train_tokenizer (optional) -> preprocess, an array over run.node_array_size.

Each dataset's steps() says which job programs run and how (array or single, tasks per node, CPUs per task);
the data preparation stage submits exactly that, so a new dataset adds steps here and a job program, nothing else.
"""

import dataclasses
import re
from typing import Any, ClassVar, Literal

from ..binding import (
    StageSchema,
    bind_stage,
    config_fault,
    field_fault,
    nearest,
    non_negative,
    positive,
    positive_fields,
)
from ..file_numbers import FileNumbersError, parse_file_numbers
from ..lddl import LddlBinning
from ..tokenizers import MEGATRON_TYPE_FILES, TokenizerLibrary
from .run import RunBase

STAGE = "data_preparation"
OnMalformed = Literal["skip", "fail"]


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """One job of the chain: the program `nemo_launcher.jobs.data.<name>` and how it is spread.

    Arrays run one task per item (Slurm --array=<items>%<array_limit>; the task reads its item from
    SLURM_ARRAY_TASK_ID); without arrays (BCP) the items are dealt over bcp_nodes x bcp_tasks_per_node processes.
    A task with tasks_per_node > 1 starts that many processes (srun over all of them, torchrun here).
    """

    name: str
    items: tuple[int, ...] | None = None  # array items (shard numbers or node indices); None: one job
    array_limit: int | None = None  # array tasks running at once
    tasks_per_node: int = 1  # processes of one array task (or of the single job)
    cpus_per_task: int | None = None  # --cpus-per-task; None: the cluster's default
    bcp_nodes: int = 1
    bcp_tasks_per_node: int = 1
    uses_gpus: bool = False  # the step's processes each take a GPU (one per task of the node)
    gpus_per_node: int | None = None  # GPUs the step asks for on a node, when uses_gpus; None: the cluster's
    # True: array task i reads only what task i of the array step before wrote (Slurm aftercorr); False: it reads
    # what every task of that step wrote, so it waits for the whole step.
    per_task: bool = True


class OneStepDataStage(StageSchema, stage=STAGE):
    """Mixed into a data_preparation schema that runs as one job, the family's program `<package>.<step>` writing
    `output_dir` (generated data, or a dataset repacked); it reads nothing unless the schema says otherwise. Its run
    section is RunBase's keys alone."""

    step: ClassVar[str]

    def steps(self) -> list[StepPlan]:
        return [StepPlan(self.step)]

    def reads(self) -> list[tuple[str, str]]:
        return []

    def writes(self) -> list[str]:
        return [self.output_dir]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataRun(RunBase):
    node_array_size: int = 1  # Slurm: array tasks at once (pile) or preprocessing nodes (custom); BCP: nodes
    array: str | int | None = None  # echo of file_numbers, as the seed's configs carry it
    bcp_preproc_npernode: int = 1  # BCP: preprocessing processes per node (mpirun)
    cpus_per_node: int | None = None  # --cpus-per-task of each array task; null = the cluster's default
    workers_per_node: int | None = None  # tokenizer workers per node; null = one per CPU the task may use

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "node_array_size", "bcp_preproc_npernode")
        for name in ("cpus_per_node", "workers_per_node"):
            if getattr(self, name) is not None:
                positive(f"{key}.{name}", getattr(self, name))


@dataclasses.dataclass(frozen=True)
class DownloadSection:
    retries: int = 5  # attempts after the first; each resumes the partial file
    timeout_s: float = 60  # seconds without data before an attempt is abandoned
    backoff_s: float = 2  # wait before retry k: backoff_s * 2^(k-1), at most 60 s

    def check(self, key: str) -> None:
        non_negative(f"{key}.retries", self.retries)
        positive(f"{key}.timeout_s", self.timeout_s)
        non_negative(f"{key}.backoff_s", self.backoff_s)


def _check_per_shard_name(key: str, pattern: str) -> None:
    """A file name pattern must format with {file_number} and give each shard its own name."""
    try:
        names = {pattern.format(file_number=0), pattern.format(file_number=1)}
    except (KeyError, IndexError, ValueError) as error:
        raise config_fault(
            key, pattern, f'cannot be formatted with file_number ({error}); use e.g. "{{file_number:02d}}.jsonl.zst"'
        ) from None
    if len(names) == 1:
        raise config_fault(
            key, pattern, "must contain {file_number} (e.g. {file_number:02d}), or every shard writes the same file"
        )


# What the job's fetcher (jobs/steps/fetch.py) reads: http(s):// and file:// URLs, package://<module>/<path> for a
# file an installed package ships, and absolute paths (scheme "").
FETCH_SCHEMES = ("http", "https", "file", "package")
# The Pile's training set as its mirrors serve it: <url>/00.jsonl.zst .. <url>/29.jsonl.zst.
PILE_TRAIN_SHARDS = 30
_PILE_TRAIN_PATH = re.compile(r"/pile/train/$")
# A Hugging Face dataset repository, as git clones it and <url>/resolve/main/<path> serves its files.
_HF_DATASET_URL = re.compile(r"^https?://huggingface\.co/datasets/[^/\s]+/[^/\s]+/?$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_fetch_source(key: str, url: str) -> None:
    """A download source the fetcher can read, checked at launch rather than after the queue wait."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        if not url.startswith("/"):
            raise config_fault(
                key,
                url,
                "use an http(s)://, file:// or package:// URL, or an absolute path (the job does not start "
                "in your directory)",
            )
        return
    if scheme not in FETCH_SCHEMES:
        raise config_fault(
            key, url, f"the downloader reads {', '.join(s + '://' for s in FETCH_SCHEMES)} URLs and absolute paths"
        )
    if scheme == "file" and not rest.startswith("/"):
        raise config_fault(key, url, "a file:// URL needs an absolute path: file:///path/to/it")


def check_pile_url(key: str, url: str) -> None:
    """Shard n is fetched from <the_pile_url><shard_name>: a folder URL, ending in `/`."""
    if not url.startswith(("http://", "https://", "file://")):
        raise config_fault(key, url, "use the http(s):// or file:// URL of the folder holding the shards")
    check_fetch_source(key, url)
    if not url.endswith("/"):
        raise config_fault(key, url, f"end it with / (shard n is <the_pile_url><shard_name>): {url}/")


def check_mc4_repo(key: str, url: str) -> None:
    """The mC4 steps clone a Hugging Face dataset repository, or list a file:// folder in its layout."""
    if _REPO_ID.match(url):
        raise config_fault(key, url, f"a repository id is not a URL: use https://huggingface.co/datasets/{url}")
    scheme, sep, rest = url.partition("://")
    if scheme not in ("http", "https", "file") or not sep:
        raise config_fault(key, url, "use the https:// URL of the dataset repository or a file:// folder")
    if scheme == "file" and not rest.startswith("/"):
        raise config_fault(key, url, "a file:// URL needs an absolute path: file:///path/to/it")
    if "huggingface.co" in rest.split("/", 1)[0] and not _HF_DATASET_URL.match(url):
        raise config_fault(
            key, url, "a Hugging Face dataset's URL is https://huggingface.co/datasets/<owner>/<name> (e.g. allenai/c4)"
        )


@dataclasses.dataclass(frozen=True)
class _Tokenizing:
    """Keys both datasets share: how documents become tokens."""

    preprocessed_dir: str  # <output prefix>_<json_key>_document.{bin,idx} go here
    json_key: str = "text"  # the field of each JSON line that holds the document
    append_eod: bool = True  # end every document with eod_token
    eod_token: str | None = None  # null: the tokenizer's own end-of-document token
    on_malformed: OnMalformed = "skip"  # skip: report each bad line as file:line, count it, go on; fail: stop
    # An input file that yields no document (empty, or no valid line) stops the step naming it; true writes an
    # empty dataset for it instead (which a training then refuses to open). Pile shards and custom files only: an
    # mC4 split joins many files, and one of them may well hold nothing.
    allow_empty_shards: bool = False
    chunk_size_mb: float = 16  # input MB per unit of work
    progress: bool = True  # progress bars (MB/s, documents/s, ETA) on stderr
    preprocess_data: bool = True  # run the preprocess step
    # One indexed item per sentence, documents as runs of sentences: what megatron-core's BERT and T5 datasets
    # sample from. False: one item per document (GPT).
    split_sentences: bool = False
    # With split_sentences: longer sentences become several items of at most this many tokens. megatron-core
    # drops every multi-sentence document holding a sentence over 512 tokens; null keeps sentences whole.
    max_sentence_tokens: int | None = 512
    train_tokenizer: bool = False  # train the tokenizer on the dataset's text before preprocessing
    # Trainer options: vocab_size, min_frequency (WordPiece, byte-level BPE); SentencePiece's spm_train options
    train_tokenizer_args: dict[str, Any] = dataclasses.field(default_factory=dict)

    def tokenizer_files(self) -> dict[str, str | None]:
        """The tokenizer preprocessing builds: library, megatron type and files (the job's TokenizerSpec keys)."""
        return dict(
            library=self.tokenizer_library, type=None, vocab_file=None, merge_file=None, model=self.tokenizer_model
        )

    def check_tokenizing(self, key: str) -> None:
        positive(f"{key}.chunk_size_mb", self.chunk_size_mb)
        if not self.json_key:
            raise field_fault(self, key, "json_key", "name the JSON field that holds each document, e.g. text")
        if self.max_sentence_tokens is not None:
            positive(f"{key}.max_sentence_tokens", self.max_sentence_tokens)
        vocab_size = self.train_tokenizer_args.get("vocab_size")
        if (
            self.train_tokenizer
            and vocab_size is not None
            and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1)
        ):
            raise config_fault(f"{key}.train_tokenizer_args.vocab_size", vocab_size, "must be a positive integer")

    def check_tokenizer_files(self, key: str, library: str, tokenizer_type: str | None) -> None:
        """The files the configured tokenizer is built from are named (they may not exist yet)."""
        if library == "megatron":
            if tokenizer_type is None:
                tokenizer_type = "GPT2BPETokenizer"
            if tokenizer_type not in MEGATRON_TYPE_FILES:
                close = nearest(tokenizer_type, list(MEGATRON_TYPE_FILES))
                raise config_fault(
                    f"{key}.tokenizer_type",
                    tokenizer_type,
                    f"the megatron library builds {', '.join(MEGATRON_TYPE_FILES)}"
                    + (f" (nearest: {', '.join(close)})" if close else ""),
                )
            needed = MEGATRON_TYPE_FILES[tokenizer_type]
        else:
            needed = ("tokenizer_model",)
        for name in needed if (self.preprocess_data or self.train_tokenizer) else ():
            if not getattr(self, name):
                what = f"tokenizer_library {library}" + (
                    f" with tokenizer_type {tokenizer_type}" if library == "megatron" else ""
                )
                raise config_fault(f"{key}.{name}", getattr(self, name), f"{what} needs this file")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PileConfig(_Tokenizing):
    run: DataRun
    dataset: Literal["pile"]
    file_numbers: str | int  # shards, e.g. "0-29", "0", "0,3,5-7"
    the_pile_url: str  # base URL (http(s)://, file://); shard n is <the_pile_url><shard_name>
    the_pile_dir: str
    shard_name: str  # file name at the_pile_url and in raw_dir, with {file_number}
    raw_dir: str
    extracted_dir: str
    output_prefix: str  # with {file_number}
    tokenizer_library: TokenizerLibrary
    download_the_pile: bool = True  # run the download and extract steps
    download_vocab_url: str | None = None  # fetched to vocab_file when missing
    download_merges_url: str | None = None  # fetched to merge_file when missing
    vocab_save_dir: str | None = None
    merges_save_dir: str | None = None
    tokenizer_type: str | None = (
        None  # library megatron: GPT2BPETokenizer (null too) or a BertWordPiece type; others ignore it
    )
    vocab_file: str | None = None  # GPT-2 vocab.json, or WordPiece vocab.txt
    merge_file: str | None = None  # GPT-2 merges.txt (WordPiece has none)
    tokenizer_model: str | None = None  # SentencePiece .model or Hugging Face tokenizer.json
    rm_downloaded: bool = True  # extract removes the .zst once the jsonl is complete
    rm_extracted: bool = True  # preprocess removes the jsonl once its .bin/.idx are complete
    checksums: dict[str, str] = dataclasses.field(default_factory=dict)  # shard file name -> sha256 (hex)
    download: DownloadSection = DownloadSection()
    # BERT's LDDL data: sentence pairs binned by length (contract/lddl.py), written by the lddl_bin step; null: none
    lddl: LddlBinning | None = None

    def check(self, key: str) -> None:
        self.check_tokenizing(key)
        shards = self.shard_numbers(key)
        if self.download_the_pile:
            check_pile_url(f"{key}.the_pile_url", self.the_pile_url)
            if _PILE_TRAIN_PATH.search(self.the_pile_url) and shards[-1] >= PILE_TRAIN_SHARDS:
                raise field_fault(
                    self,
                    key,
                    "file_numbers",
                    f"the Pile's training set has {PILE_TRAIN_SHARDS} shards (0-{PILE_TRAIN_SHARDS - 1}); "
                    f"shard {shards[-1]} does not exist",
                )
        for name in ("download_vocab_url", "download_merges_url"):
            if getattr(self, name):
                check_fetch_source(f"{key}.{name}", getattr(self, name))
        _check_per_shard_name(f"{key}.shard_name", self.shard_name)
        _check_per_shard_name(f"{key}.output_prefix", self.output_prefix)
        if not (self.download_the_pile or self.preprocess_data or self.train_tokenizer):
            raise config_fault(
                f"{key}.preprocess_data",
                False,
                "every step is switched off; enable download_the_pile or preprocess_data",
            )
        if self.lddl is not None and (self.tokenizer_library, self.tokenizer_type) != (
            "megatron",
            "BertWordPieceLowerCase",
        ):
            raise field_fault(
                self, key, "tokenizer_type", "LDDL's pairs are lower-case WordPiece: use BertWordPieceLowerCase"
            )
        if self.lddl is not None and self.preprocess_data and self.rm_extracted:
            raise field_fault(
                self,
                key,
                "rm_extracted",
                "preprocess would delete the extracted shards the lddl_bin step reads: set rm_extracted=False, or "
                "preprocess_data=False (lddl_bin then deletes them itself)",
            )
        self.check_tokenizer_files(key, self.tokenizer_library, self.tokenizer_type)
        if self.train_tokenizer:
            _check_trainable(key, self.tokenizer_library, self.tokenizer_type, self.download_vocab_url)

    def tokenizer_files(self) -> dict[str, str | None]:
        return dict(
            library=self.tokenizer_library,
            type=self.tokenizer_type,
            vocab_file=self.vocab_file,
            merge_file=self.merge_file,
            model=self.tokenizer_model,
        )

    def shard_numbers(self, key: str = STAGE) -> list[int]:
        try:
            return parse_file_numbers(self.file_numbers, key=f"{key}.file_numbers")
        except FileNumbersError as error:
            raise field_fault(self, key, "file_numbers", str(error).split(": ", 1)[-1]) from None

    def reads(self) -> list[tuple[str, str]]:
        """Shards served from this filesystem (file:// URLs) are inputs; http(s) ones are fetched by the job."""
        if not (self.download_the_pile and self.the_pile_url.startswith("file://")):
            return []
        base = self.the_pile_url[len("file://") :]
        return [
            (f"{STAGE}.the_pile_url", f"{base}{self.shard_name.format(file_number=n)}") for n in self.shard_numbers()
        ]

    def writes(self) -> list[str]:
        return (
            [self.run.results_dir, self.preprocessed_dir, self.raw_dir, self.extracted_dir]
            + [path for path in (self.vocab_file, self.merge_file, self.tokenizer_model) if path]
            + ([self.lddl.output_dir] if self.lddl is not None else [])
        )

    def steps(self) -> list[StepPlan]:
        """download, extract and preprocess are arrays over the shards (one node each); train_tokenizer is one job."""
        shards = tuple(self.shard_numbers())
        array = dict(
            items=shards,
            array_limit=self.run.node_array_size,
            cpus_per_task=self.run.cpus_per_node,
            bcp_nodes=min(self.run.node_array_size, len(shards)),
        )
        plans = [StepPlan(name, **array) for name in ("download", "extract")] if self.download_the_pile else []
        if self.train_tokenizer:
            plans.append(StepPlan("train_tokenizer", cpus_per_task=self.run.cpus_per_node))
        if self.preprocess_data:
            plans.append(StepPlan("preprocess", bcp_tasks_per_node=self.run.bcp_preproc_npernode, **array))
        if self.lddl is not None:
            # Reads the extracted shards only: a shard's binning waits for that shard, not for preprocess.
            plans.append(StepPlan("lddl_bin", **array))
        return plans


@dataclasses.dataclass(frozen=True, kw_only=True)
class CustomDatasetConfig(_Tokenizing):
    run: DataRun
    dataset: Literal["custom_dataset"]
    custom_dataset_dir: str
    bpe_save_dir: str  # where a trained tokenizer is written
    raw_dataset_files: list[str | None]  # json, jsonl or json.gz files; null entries are skipped
    tokenizer_library: Literal["sentencepiece", "huggingface"] = "sentencepiece"
    train_tokenizer: bool = True  # train a tokenizer on the raw files first
    tokenizer_model: str | None = None  # the model preprocessing uses (the trained one by default)
    preprocess_worker_mapping: str | None = None  # written for reading: which node got which files

    def check(self, key: str) -> None:
        self.check_tokenizing(key)
        if not (self.train_tokenizer or self.preprocess_data):
            raise config_fault(
                f"{key}.preprocess_data", False, "every step is switched off; enable train_tokenizer or preprocess_data"
            )
        if self.preprocess_data and not self.files():
            raise field_fault(self, key, "raw_dataset_files", "list the json/jsonl/json.gz files to preprocess")
        if not self.tokenizer_model:
            raise field_fault(self, key, "tokenizer_model", "name the tokenizer model file to train or to use")

    def files(self) -> list[str]:
        return [f for f in self.raw_dataset_files if f is not None]

    def reads(self) -> list[tuple[str, str]]:
        paths = [(f"{STAGE}.raw_dataset_files", path) for path in self.files()]
        if not self.train_tokenizer and self.tokenizer_model:
            paths.append((f"{STAGE}.tokenizer_model", self.tokenizer_model))
        return paths

    def writes(self) -> list[str]:
        return [self.run.results_dir, self.preprocessed_dir, self.bpe_save_dir] + (
            [self.tokenizer_model] if self.tokenizer_model else []
        )

    def steps(self) -> list[StepPlan]:
        """train_tokenizer is one task; preprocess is an array over run.node_array_size nodes."""
        nodes = self.run.node_array_size
        plans = [StepPlan("train_tokenizer", cpus_per_task=self.run.cpus_per_node)] if self.train_tokenizer else []
        if self.preprocess_data:
            plans.append(
                StepPlan(
                    "preprocess",
                    items=tuple(range(nodes)),
                    array_limit=nodes,
                    cpus_per_task=self.run.cpus_per_node,
                    bcp_nodes=nodes,
                    bcp_tasks_per_node=self.run.bcp_preproc_npernode,
                )
            )
        return plans


# mC4's language codes: "de", "zh-Latn", "und"; `all` selects every language the repository holds.
_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[A-Za-z]{2,8})?$")
MC4_DEFAULT_LANGUAGES = "cs,da,de,el,en,es,fi,fr,hi,hu,it,ja,ko,lt,lv,nl,no,pl,pt,ro,ru,sk,sv,zh"


def mc4_languages(value: str | list[str]) -> list[str]:
    """`languages` as a list: "cs,da" or [cs, da] -> ["cs", "da"]; ["all"] for all."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mc4Config(_Tokenizing):
    run: DataRun
    dataset: Literal["mc4"]
    mc4_dir: str  # everything mC4 goes below it (by default)
    git_lfs_dir: str  # the repository's clone (file names, sizes, sha256) and the downloaded .json.gz files
    # The dataset repository: a Hugging Face dataset (git clone for the listing, <url>/resolve/main/<path> for
    # each file), or a file:// folder in the same layout (multilingual/c4-<lang>.tfrecord-*.json.gz, en/c4-train.*).
    mc4_repo_url: str = "https://huggingface.co/datasets/allenai/c4"
    download_mc4: bool = True  # run the prepare and download steps
    download_vocab_url: str | None = None  # fetched to <vocab_save_dir>/<its file name> when missing
    download_tokenizer_url: str | None = None  # fetched to tokenizer_model when missing
    vocab_save_dir: str | None = None
    tokenizer_save_dir: str | None = None
    tokenizer_library: Literal["sentencepiece"] = "sentencepiece"
    tokenizer_model: str  # the SentencePiece model preprocessing uses
    languages: str | list[str] = MC4_DEFAULT_LANGUAGES  # "cs,da,...", a list, or "all"
    use_cleaned_english: bool = True  # en: the cleaned C4 (en/c4-train.*) instead of mC4's multilingual/c4-en.*
    softlinks_dir: str  # <lang>/<split>/: links to the files of each split
    max_split_size: float = 200  # GB of .json.gz per split; each split is one preprocessing unit and one dataset
    download_worker_mapping: str  # written by prepare: the files, and which download node fetches which
    preprocess_worker_mapping: str  # written by setup_preprocess: the splits, and which worker builds which
    rm_downloaded: bool = False  # preprocess removes a split's .json.gz files once its dataset is complete
    download: DownloadSection = DownloadSection()

    def check(self, key: str) -> None:
        self.check_tokenizing(key)
        positive(f"{key}.max_split_size", self.max_split_size)
        if self.download_mc4:
            check_mc4_repo(f"{key}.mc4_repo_url", self.mc4_repo_url)
        for name in ("download_vocab_url", "download_tokenizer_url"):
            if getattr(self, name):
                check_fetch_source(f"{key}.{name}", getattr(self, name))
        if not (self.download_mc4 or self.preprocess_data or self.train_tokenizer):
            raise config_fault(
                f"{key}.preprocess_data", False, "every step is switched off; enable download_mc4 or preprocess_data"
            )
        languages = self.language_list()
        if not languages:
            raise field_fault(self, key, "languages", "list languages, e.g. 'cs,da,de', or all")
        for language in languages:
            if language != "all" and not _LANGUAGE.match(language):
                raise field_fault(
                    self,
                    key,
                    "languages",
                    f"{language!r} is not an mC4 language code (e.g. de, zh, zh-Latn); or use all",
                )
        if "all" in languages and len(languages) > 1:
            raise field_fault(self, key, "languages", "all selects every language; list no others with it")
        if self.run.workers_per_node is None:
            raise config_fault(
                f"{key}.run.workers_per_node", None, "mc4 preprocessing runs this many tasks per node; set it, e.g. 4"
            )
        if self.run.cpus_per_node is not None and self.run.cpus_per_node < self.run.workers_per_node:
            raise config_fault(
                f"{key}.run.cpus_per_node",
                self.run.cpus_per_node,
                f"each of the run.workers_per_node={self.run.workers_per_node} tasks needs a CPU; raise it",
            )
        self.check_tokenizer_files(key, "sentencepiece", None)
        if self.train_tokenizer and self.download_tokenizer_url:
            raise field_fault(
                self,
                key,
                "download_tokenizer_url",
                "train_tokenizer writes tokenizer_model; set download_tokenizer_url=null, or train_tokenizer=false",
            )

    def language_list(self) -> list[str]:
        return mc4_languages(self.languages)

    def cpus_per_task(self) -> int | None:
        if self.run.cpus_per_node is None:
            return None
        return self.run.cpus_per_node // self.run.workers_per_node

    def reads(self) -> list[tuple[str, str]]:
        """A local repository folder is an input; a remote one is cloned and fetched by the jobs."""
        if self.download_mc4 and self.mc4_repo_url.startswith("file://"):
            return [(f"{STAGE}.mc4_repo_url", self.mc4_repo_url[len("file://") :])]
        return []

    def writes(self) -> list[str]:
        return [
            self.run.results_dir,
            self.mc4_dir,
            self.git_lfs_dir,
            self.softlinks_dir,
            self.preprocessed_dir,
            self.tokenizer_model,
            self.download_worker_mapping,
            self.preprocess_worker_mapping,
        ]

    def steps(self) -> list[StepPlan]:
        """prepare -> download (array over nodes) -> setup_preprocess -> train_tokenizer -> preprocess (array over
        nodes, run.workers_per_node tasks each with cpus_per_node / workers_per_node CPUs)."""
        nodes = self.run.node_array_size
        node_items = dict(items=tuple(range(nodes)), array_limit=nodes, bcp_nodes=nodes)
        plans = []
        if self.download_mc4:
            plans += [StepPlan("prepare"), StepPlan("download", cpus_per_task=self.run.cpus_per_node, **node_items)]
        if self.preprocess_data:
            plans.append(StepPlan("setup_preprocess"))
        if self.train_tokenizer:
            plans.append(StepPlan("train_tokenizer", cpus_per_task=self.run.cpus_per_node))
        if self.preprocess_data:
            workers = self.run.workers_per_node
            plans.append(
                StepPlan(
                    "preprocess",
                    tasks_per_node=workers,
                    cpus_per_task=self.cpus_per_task(),
                    bcp_tasks_per_node=workers,
                    **node_items,
                )
            )
        return plans


def _check_trainable(key: str, library: str, tokenizer_type: str | None, vocab_url: str | None) -> None:
    """Pile configs train WordPiece (vocab_file), SentencePiece or byte-level BPE (tokenizer_model); GPT-2's BPE
    is downloaded, never trained."""
    if library == "megatron" and tokenizer_type in (None, "GPT2BPETokenizer"):
        raise config_fault(
            f"{key}.train_tokenizer",
            True,
            "GPT2BPETokenizer is downloaded, not trained; train a BertWordPiece* type, sentencepiece or huggingface",
        )
    if library == "megatron" and vocab_url:
        raise config_fault(
            f"{key}.download_vocab_url",
            vocab_url,
            "train_tokenizer writes vocab_file; set download_vocab_url=null, or train_tokenizer=false",
        )


DATASETS = {"pile": PileConfig, "mc4": Mc4Config, "custom_dataset": CustomDatasetConfig}


class DataPreparation:
    """Binds a data_preparation section to the schema its `dataset` names."""

    @staticmethod
    def from_dict(data: dict[str, Any], stage: str = STAGE) -> PileConfig | Mc4Config | CustomDatasetConfig:
        dataset = data.get("dataset") if isinstance(data, dict) else None
        if dataset not in DATASETS:
            raise config_fault(f"{stage}.dataset", dataset, f"choose one of {', '.join(DATASETS)}")
        return bind_stage(DATASETS[dataset], data, stage)
