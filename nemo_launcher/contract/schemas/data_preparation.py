"""Schema of the resolved `data_preparation` section (conf/data_preparation/*/*.yaml), one per `dataset`.

    cfg = DataPreparation.from_dict(section)     # PileConfig or CustomDatasetConfig, chosen by `dataset`

`pile`: download (.jsonl.zst) -> extract (.jsonl) -> preprocess (.bin/.idx), each a Slurm array over
file_numbers. `custom_dataset`: train_tokenizer (optional) -> preprocess, an array over run.node_array_size.
"""
import dataclasses
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from ..binding import bind_stage, config_fault, non_negative, positive, positive_fields
from ..file_numbers import FileNumbersError, parse_file_numbers
from .run import RunBase

STAGE = "data_preparation"
OnMalformed = Literal["skip", "fail"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataRun(RunBase):
    node_array_size: int = 1  # Slurm: array tasks at once (pile) or preprocessing nodes (custom); BCP: nodes
    array: Optional[Union[str, int]] = None  # echo of file_numbers, as the seed's configs carry it
    bcp_preproc_npernode: int = 1  # BCP: preprocessing processes per node (mpirun)
    cpus_per_node: Optional[int] = None  # --cpus-per-task of each array task; null = the cluster's default
    workers_per_node: Optional[int] = None  # tokenizer workers per node; null = one per CPU the task may use

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
        raise config_fault(key, pattern, f"cannot be formatted with file_number ({error}); use e.g. \"{{file_number:02d}}.jsonl.zst\"") from None
    if len(names) == 1:
        raise config_fault(key, pattern, "must contain {file_number} (e.g. {file_number:02d}), or every shard writes the same file")


@dataclasses.dataclass(frozen=True)
class _Tokenizing:
    """Keys both datasets share: how documents become tokens."""

    preprocessed_dir: str  # <output prefix>_<json_key>_document.{bin,idx} go here
    json_key: str = "text"  # the field of each JSON line that holds the document
    append_eod: bool = True  # end every document with eod_token
    eod_token: Optional[str] = None  # null: the tokenizer's own end-of-document token
    on_malformed: OnMalformed = "skip"  # skip: report each bad line as file:line, count it, go on; fail: stop
    chunk_size_mb: float = 16  # input MB per unit of work
    progress: bool = True  # progress bars (MB/s, documents/s, ETA) on stderr
    preprocess_data: bool = True  # run the preprocess step

    def check_tokenizing(self, key: str) -> None:
        positive(f"{key}.chunk_size_mb", self.chunk_size_mb)
        if not self.json_key:
            raise config_fault(f"{key}.json_key", self.json_key, "name the JSON field that holds each document, e.g. text")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PileConfig(_Tokenizing):
    run: DataRun
    dataset: Literal["pile"]
    file_numbers: Union[str, int]  # shards, e.g. "0-29", "0", "0,3,5-7"
    the_pile_url: str  # base URL (http(s)://, file://); shard n is <the_pile_url><shard_name>
    the_pile_dir: str
    shard_name: str  # file name at the_pile_url and in raw_dir, with {file_number}
    raw_dir: str
    extracted_dir: str
    output_prefix: str  # with {file_number}
    tokenizer_library: Literal["megatron", "sentencepiece", "huggingface"]
    download_the_pile: bool = True  # run the download and extract steps
    download_vocab_url: Optional[str] = None  # fetched to vocab_file when missing
    download_merges_url: Optional[str] = None  # fetched to merge_file when missing
    vocab_save_dir: Optional[str] = None
    merges_save_dir: Optional[str] = None
    tokenizer_type: Optional[str] = None  # GPT2BPETokenizer for library megatron
    vocab_file: Optional[str] = None
    merge_file: Optional[str] = None
    tokenizer_model: Optional[str] = None  # SentencePiece .model or Hugging Face tokenizer.json
    rm_downloaded: bool = True  # extract removes the .zst once the jsonl is complete
    rm_extracted: bool = True  # preprocess removes the jsonl once its .bin/.idx are complete
    checksums: Dict[str, str] = dataclasses.field(default_factory=dict)  # shard file name -> sha256 (hex)
    download: DownloadSection = DownloadSection()

    def check(self, key: str) -> None:
        self.check_tokenizing(key)
        self.shard_numbers(key)
        _check_per_shard_name(f"{key}.shard_name", self.shard_name)
        _check_per_shard_name(f"{key}.output_prefix", self.output_prefix)
        if not (self.download_the_pile or self.preprocess_data):
            raise config_fault(f"{key}.preprocess_data", False, "every step is switched off; enable download_the_pile or preprocess_data")
        needed = {"megatron": ("vocab_file", "merge_file"), "sentencepiece": ("tokenizer_model",),
                  "huggingface": ("tokenizer_model",)}[self.tokenizer_library]
        for name in needed if self.preprocess_data else ():
            if not getattr(self, name):
                raise config_fault(f"{key}.{name}", getattr(self, name), f"tokenizer_library {self.tokenizer_library} needs this file")

    def shard_numbers(self, key: str = STAGE) -> List[int]:
        try:
            return parse_file_numbers(self.file_numbers, key=f"{key}.file_numbers")
        except FileNumbersError as error:
            raise config_fault(f"{key}.file_numbers", self.file_numbers, str(error).split(": ", 1)[-1]) from None

    def reads(self) -> List[Tuple[str, str]]:
        """Shards served from this filesystem (file:// URLs) are inputs; http(s) ones are fetched by the job."""
        if not (self.download_the_pile and self.the_pile_url.startswith("file://")):
            return []
        base = self.the_pile_url[len("file://"):]
        return [(f"{STAGE}.the_pile_url", f"{base}{self.shard_name.format(file_number=n)}") for n in self.shard_numbers()]

    def writes(self) -> List[str]:
        return [self.run.results_dir, self.preprocessed_dir, self.raw_dir, self.extracted_dir] + [
            path for path in (self.vocab_file, self.merge_file, self.tokenizer_model) if path]

    def steps(self) -> List[str]:
        """The job programs this config runs, in order (each an array over the shards)."""
        return (["download", "extract"] if self.download_the_pile else []) + (["preprocess"] if self.preprocess_data else [])


@dataclasses.dataclass(frozen=True, kw_only=True)
class CustomDatasetConfig(_Tokenizing):
    run: DataRun
    dataset: Literal["custom_dataset"]
    custom_dataset_dir: str
    bpe_save_dir: str  # where a trained tokenizer is written
    raw_dataset_files: List[Optional[str]]  # json, jsonl or json.gz files; null entries are skipped
    tokenizer_library: Literal["sentencepiece", "huggingface"] = "sentencepiece"
    train_tokenizer: bool = True  # train a tokenizer on the raw files first
    train_tokenizer_args: Dict[str, Any] = dataclasses.field(default_factory=dict)  # SentencePiece trainer options
    tokenizer_model: Optional[str] = None  # the model preprocessing uses (the trained one by default)
    preprocess_worker_mapping: Optional[str] = None  # written for reading: which node got which files

    def check(self, key: str) -> None:
        self.check_tokenizing(key)
        if not (self.train_tokenizer or self.preprocess_data):
            raise config_fault(f"{key}.preprocess_data", False, "every step is switched off; enable train_tokenizer or preprocess_data")
        if self.preprocess_data and not self.files():
            raise config_fault(f"{key}.raw_dataset_files", self.raw_dataset_files, "list the json/jsonl/json.gz files to preprocess")
        if not self.tokenizer_model:
            raise config_fault(f"{key}.tokenizer_model", self.tokenizer_model, "name the tokenizer model file to train or to use")
        vocab_size = self.train_tokenizer_args.get("vocab_size")
        if self.train_tokenizer and vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1):
            raise config_fault(f"{key}.train_tokenizer_args.vocab_size", vocab_size, "must be a positive integer")

    def files(self) -> List[str]:
        return [f for f in self.raw_dataset_files if f is not None]

    def reads(self) -> List[Tuple[str, str]]:
        paths = [(f"{STAGE}.raw_dataset_files", path) for path in self.files()]
        if not self.train_tokenizer and self.tokenizer_model:
            paths.append((f"{STAGE}.tokenizer_model", self.tokenizer_model))
        return paths

    def writes(self) -> List[str]:
        return [self.run.results_dir, self.preprocessed_dir, self.bpe_save_dir] + ([self.tokenizer_model] if self.tokenizer_model else [])

    def steps(self) -> List[str]:
        """train_tokenizer is one task; preprocess is an array over run.node_array_size nodes."""
        return (["train_tokenizer"] if self.train_tokenizer else []) + (["preprocess"] if self.preprocess_data else [])


DATASETS = {"pile": PileConfig, "custom_dataset": CustomDatasetConfig}


class DataPreparation:
    """Binds a data_preparation section to the schema its `dataset` names."""

    @staticmethod
    def from_dict(data: Dict[str, Any], stage: str = STAGE) -> Union[PileConfig, CustomDatasetConfig]:
        dataset = data.get("dataset") if isinstance(data, dict) else None
        if dataset not in DATASETS:
            raise config_fault(f"{stage}.dataset", dataset, f"choose one of {', '.join(DATASETS)}")
        return bind_stage(DATASETS[dataset], data, stage)
