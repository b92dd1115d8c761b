"""Schema of `data_preparation=multimodal/*`: image-text pairs from parquet files into WebDataset tars.

    cfg = MultimodalDataConfig.from_dict(section)   # the launcher and every step program bind the same file
    cfg.steps()                                      # the enabled sub-stages, in the seed's fixed order

Sub-stages (each a job running `nemo_launcher.jobs.multimodal.<name>`; the folder keys chain them by default):

| step | shape | reads | writes |
|---|---|---|---|
| generate_shapes | one job (synthetic corpus, tiny configs) | - | a parquet repository + images |
| download_parquet | one job | dataset_repo_url | parquet sub-partitions |
| download_images | array: one task per parquet sub-file | parquet (url, caption) | raw tars + per-shard records |
| reorganize_tar | array of node_array_size | raw tars | tars of tar_chunk_size examples |
| precache_encodings | array of node_array_size x tasks_per_node | tars | tars of .pickle embeddings |
| generate_wdinfo | one job | tars | wdinfo.pkl |

download_images runs one task per parquet sub-file. reorganize_tar and precache_encodings cut their input into
node_array_size shares; a task's share is fixed by (task id, task count): Slurm's array index and the array size, or
`override_task_id` / `override_task_count` to redo tasks of an earlier run (node_array_size "50-99" with
override_task_count 100 reruns tasks 50-99 of 100; node_array_size 1 with override_task_id 67 reruns task 67).
"""

import dataclasses
import glob
import os
from typing import Any, Literal

from ..binding import StageSchema, bind, config_fault, field_fault, positive, positive_fields
from ..file_numbers import FileNumbersError, parse_file_numbers
from .data_preparation import StepPlan
from .run import RunBase

STAGE = "data_preparation"
# Slurm array tasks running at once, as the seed's launcher throttles every multimodal array.
ARRAY_LIMIT = 50
RESIZE_MODES = ("no", "keep_ratio", "center_crop", "border")
ENCODE_FORMATS = ("jpg", "png", "webp")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultimodalRun(RunBase):
    cpus_per_task: int | None = None  # --cpus-per-task of every job; null: the cluster's default

    def check(self, key: str) -> None:
        super().check(key)
        if self.cpus_per_task is not None:
            positive(f"{key}.cpus_per_task", self.cpus_per_task)


@dataclasses.dataclass(frozen=True)
class GenerateShapes:
    """A synthetic image-caption corpus (coloured shapes) written as a parquet repository with file:// image URLs,
    so that tiny configs and quick starts run the whole pipeline without a network."""

    enable: bool = False
    output_dir: str = ""  # the repository folder: <output_dir>/data/*.parquet and <output_dir>/images/*.png
    num_examples: int = 480
    num_parquet_files: int = 2
    image_size: int = 64  # pixels, square
    seed: int = 0
    # Also write the corpus as class folders <class_folders>/{train,val}/<class>/<n>.png (vision/shape_folders.py),
    # val holding num_held_out further examples the corpus does not: what CLIP's zero-shot evaluation and framework
    # inference read in the CLIP quick start. null: none.
    class_folders: str | None = None
    num_held_out: int = 120

    def check(self, key: str) -> None:
        if self.enable:
            positive_fields(self, key, "num_examples", "num_parquet_files", "image_size", "num_held_out")
            if not self.output_dir:
                raise field_fault(self, key, "output_dir", "name the folder the corpus is written to")


@dataclasses.dataclass(frozen=True)
class DownloadParquet:
    enable: bool = True
    output_dir: str = ""  # <output_dir>/<stem>_part<k>.parquet, one per sub-partition
    parquet_subpartitions: int = 3  # each downloaded parquet file is cut into this many row ranges (download tasks)
    parquet_pattern: str = "*.parquet"  # which repository files to take (fnmatch on the path inside the repository)

    def check(self, key: str) -> None:
        positive_fields(self, key, "parquet_subpartitions")
        if self.enable and not self.output_dir:
            raise field_fault(self, key, "output_dir", "name the folder the parquet files go to")


@dataclasses.dataclass(frozen=True)
class ImageDownloadArguments:
    """The img2dataset options the seed passes through, and what they mean here (same names, same defaults)."""

    url_col: str = "URL"  # parquet column with the image URL (http(s)://, file://)
    caption_col: str = "TEXT"  # parquet column with the caption; stored as <key>.txt
    input_format: str = "parquet"
    encode_format: str = "jpg"  # format of the stored images
    encode_quality: int = 95  # JPEG/WebP quality (1-100); PNG compression level 0-9 for png
    resize_mode: str = "no"  # no | keep_ratio (shorter side to image_size) | center_crop | border (pad to a square)
    image_size: int = 256  # pixels; ignored by resize_mode no
    resize_only_if_bigger: bool = False  # never upscale
    min_image_size: int = 0  # images with a smaller side are counted as failed (too small)
    number_sample_per_shard: int = 10000  # rows per output tar of one download task
    timeout: float = 10  # seconds for one HTTP attempt (connect and each read)
    retries: int = 0  # further attempts after a failed one (timeouts, resets, 5xx, 429)
    save_additional_columns: list[str] = dataclasses.field(default_factory=list)  # copied into <key>.json

    def check(self, key: str) -> None:
        if self.input_format != "parquet":
            raise field_fault(self, key, "input_format", "the parquet files are the input; use parquet")
        if self.encode_format not in ENCODE_FORMATS:
            raise field_fault(self, key, "encode_format", f"choose one of {', '.join(ENCODE_FORMATS)}")
        if self.resize_mode not in RESIZE_MODES:
            raise field_fault(self, key, "resize_mode", f"choose one of {', '.join(RESIZE_MODES)}")
        quality_range = (0, 9) if self.encode_format == "png" else (1, 100)
        if not quality_range[0] <= self.encode_quality <= quality_range[1]:
            raise field_fault(
                self, key, "encode_quality", f"{self.encode_format} takes {quality_range[0]}-{quality_range[1]}"
            )
        positive_fields(self, key, "image_size", "number_sample_per_shard", "timeout")
        if self.retries < 0 or self.min_image_size < 0:
            name = "retries" if self.retries < 0 else "min_image_size"
            raise config_fault(f"{key}.{name}", getattr(self, name), "must be 0 or more")


@dataclasses.dataclass(frozen=True)
class DownloadImages:
    enable: bool = True
    input_dir: str = ""  # the parquet files (download_parquet's output_dir)
    output_dir: str = ""  # <stem>_<shard>.tar with <stem>_<shard>_stats.json beside each finished one
    parquet_pattern: str = "*.parquet"
    # Tasks when the parquet files are not there yet at launch (download_parquet runs first in the same pipeline):
    # parquet files the repository holds x parquet_subpartitions. Once they exist, one task per file found.
    num_parquets_downloaded: int = 1
    download_num_processes: int = -1  # worker processes of one task; -1: one per CPU the task may use
    download_num_threads: int = 64  # concurrent downloads per process
    img2dataset_additional_arguments: ImageDownloadArguments = ImageDownloadArguments()

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_parquets_downloaded", "download_num_threads")
        if self.download_num_processes != -1 and self.download_num_processes < 1:
            raise field_fault(
                self, key, "download_num_processes", "use a positive count, or -1 for one per CPU of the task"
            )
        for name in ("input_dir", "output_dir"):
            if self.enable and not getattr(self, name):
                raise config_fault(f"{key}.{name}", getattr(self, name), "name the folder")


@dataclasses.dataclass(frozen=True)
class ReorganizeTar:
    enable: bool = True
    input_dir: str = ""
    output_dir: str = ""  # <index>.tar, each exactly tar_chunk_size examples except the last
    node_array_size: int | str = 2  # array tasks (an int), or the task ids "A-B" of an earlier run to redo
    tar_chunk_size: int = 1000  # examples per output tar
    file_ext_in_tar: list[str] = dataclasses.field(default_factory=lambda: [".jpg", ".txt"])  # an example needs all

    def check(self, key: str) -> None:
        positive_fields(self, key, "tar_chunk_size")
        check_extensions(f"{key}.file_ext_in_tar", self.file_ext_in_tar)


@dataclasses.dataclass(frozen=True)
class PrecacheEncodings:
    enable: bool = True
    input_dir: str = ""
    output_dir: str = ""  # t<task>_r<rank>_<n>.tar of <key>.pickle (a dict of numpy arrays per example)
    tar_chunk_size: int = 1000
    node_array_size: int | str = 4
    tasks_per_node: int = 8  # processes of one array task, one per GPU; each encodes its share of the task's tars
    precache_config_path: str = ""  # the encodings to compute (conf/_precache/*.yaml)

    def check(self, key: str) -> None:
        positive_fields(self, key, "tar_chunk_size", "tasks_per_node")
        if self.enable and not self.precache_config_path:
            raise field_fault(
                self,
                key,
                "precache_config_path",
                "name the precache spec, e.g. ${launcher_scripts_path}/conf/_precache/precache_clip.yaml",
            )


@dataclasses.dataclass(frozen=True)
class GenerateWdinfo:
    enable: bool = True
    input_dir: str = ""
    tar_chunk_size: int = 1000  # examples per tar: tars that hold fewer are listed apart in wdinfo.pkl
    file_ext_in_tar: list[str] = dataclasses.field(default_factory=lambda: [".pickle"])
    output_wdinfo_path: str = ""

    def check(self, key: str) -> None:
        positive_fields(self, key, "tar_chunk_size")
        check_extensions(f"{key}.file_ext_in_tar", self.file_ext_in_tar)
        if self.enable and not self.output_wdinfo_path.endswith(".pkl"):
            raise field_fault(self, key, "output_wdinfo_path", "name a .pkl file")


def check_extensions(key: str, extensions: list[str]) -> None:
    if not extensions or any(not ext.startswith(".") or len(ext) < 2 or "/" in ext for ext in extensions):
        raise config_fault(key, extensions, "list member extensions with their dot, e.g. [.jpg, .txt]")


def task_ids(key: str, node_array_size: int | str) -> list[int]:
    """node_array_size as the array task ids it runs: 4 -> 0..3; "50-99" -> 50..99."""
    if isinstance(node_array_size, int):
        positive(key, node_array_size)
        return list(range(node_array_size))
    try:
        return parse_file_numbers(node_array_size, key=key)
    except FileNumbersError as error:
        raise config_fault(key, node_array_size, str(error).split(": ", 1)[-1] + ", or a count") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultimodalDataConfig(StageSchema, stage=STAGE):
    run: MultimodalRun
    dataset_repo_id: str  # the Hugging Face dataset, e.g. laion/laion-art
    # Where the repository is: a Hugging Face dataset URL (git, large files through git-lfs) or a file:// folder.
    dataset_repo_url: str
    dataset_output_root: str
    # reorganize_tar and precache_encodings: which task of how many this run plays (to redo tasks of an earlier run).
    override_task_id: int | None = None
    override_task_count: int | None = None
    progress: bool = True  # progress lines (items/s, ETA) while a step runs
    generate_shapes: GenerateShapes = GenerateShapes()
    download_parquet: DownloadParquet = DownloadParquet()
    download_images: DownloadImages = DownloadImages()
    reorganize_tar: ReorganizeTar = ReorganizeTar()
    precache_encodings: PrecacheEncodings = PrecacheEncodings()
    generate_wdinfo: GenerateWdinfo = GenerateWdinfo()

    def check(self, key: str) -> None:
        if not self.dataset_repo_url.startswith(("http://", "https://", "file://")):
            raise field_fault(
                self,
                key,
                "dataset_repo_url",
                "use https://huggingface.co/datasets/<repo id> or file://<folder of parquet files>",
            )
        if not os.path.isabs(self.dataset_output_root):
            raise field_fault(self, key, "dataset_output_root", "must be an absolute path")
        if not any(getattr(self, name).enable for name in STEP_ORDER):
            raise config_fault(f"{key}.download_images.enable", False, "every sub-stage is disabled; enable one")
        if self.override_task_count is not None:
            positive(f"{key}.override_task_count", self.override_task_count)
        if self.override_task_id is not None:
            if self.override_task_count is None:
                raise field_fault(
                    self, key, "override_task_id", "say how many tasks the original run had with override_task_count"
                )
            if not 0 <= self.override_task_id < self.override_task_count:
                raise field_fault(
                    self,
                    key,
                    "override_task_id",
                    f"a task of override_task_count={self.override_task_count} "
                    f"runs is 0-{self.override_task_count - 1}",
                )
        for name in _PARTITIONED:
            if getattr(self, name).enable:
                self.partition(name, f"{key}.{name}")

    def partition(self, step: str, key: str | None = None) -> tuple[list[int], int]:
        """(array task ids this run submits, task count of the partition) of reorganize_tar or precache_encodings;
        `key` is the step's section as messages name it."""
        key = key or f"{STAGE}.{step}"
        size = getattr(self, step).node_array_size
        ids = task_ids(f"{key}.node_array_size", size)
        if self.override_task_id is not None:
            if len(ids) != 1:
                raise config_fault(
                    f"{key}.node_array_size",
                    size,
                    f"override_task_id={self.override_task_id} is one task: set node_array_size to 1, "
                    f"or disable this sub-stage ({key}.enable=false)",
                )
            return [self.override_task_id], self.override_task_count
        count = (
            self.override_task_count
            if self.override_task_count is not None
            else (len(ids) if ids == list(range(len(ids))) else None)
        )
        if count is None:
            raise config_fault(
                f"{key}.node_array_size",
                size,
                "tasks A-B redo part of an earlier run: give its task count with override_task_count",
            )
        if ids[-1] >= count:
            raise config_fault(
                f"{key}.node_array_size", size, f"task {ids[-1]} is not one of override_task_count={count} tasks"
            )
        return ids, count

    # ---- what the launcher submits -----------------------------------------------------------------------
    def parquet_files(self) -> list[str]:
        """The parquet files download_images finds now (sorted): one array task each."""
        step = self.download_images
        return sorted(glob.glob(os.path.join(glob.escape(step.input_dir), step.parquet_pattern)))

    def download_task_count(self) -> int:
        """One task per parquet file found, or, before download_parquet has run, the files it will write."""
        found = len(self.parquet_files())
        if found:
            return found
        return self.download_images.num_parquets_downloaded * self.download_parquet.parquet_subpartitions

    def steps(self) -> list[StepPlan]:
        cpus = self.run.cpus_per_task
        plans = []
        for name in STEP_ORDER:
            if not getattr(self, name).enable:
                continue
            if name == "download_images":
                count = self.download_task_count()
                plans.append(
                    StepPlan(name, items=tuple(range(count)), array_limit=min(ARRAY_LIMIT, count), cpus_per_task=cpus)
                )
            elif name in _PARTITIONED:
                ids, _ = self.partition(name)
                per_node = self.precache_encodings.tasks_per_node if name == "precache_encodings" else 1
                # Reorganizing into equal tars needs every download's count; precache task i reads only what
                # reorganize task i wrote when both cut the same partition.
                per_task = (
                    name == "precache_encodings"
                    and self.reorganize_tar.enable
                    and self.partition("reorganize_tar") == self.partition("precache_encodings")
                )
                plans.append(
                    StepPlan(
                        name,
                        items=tuple(ids),
                        array_limit=min(ARRAY_LIMIT, len(ids)),
                        tasks_per_node=per_node,
                        cpus_per_task=cpus,
                        uses_gpus=name == "precache_encodings",
                        per_task=per_task,
                    )
                )
            else:
                plans.append(StepPlan(name, cpus_per_task=cpus))
        # One task of one, or the one task override_task_id names, is a plain job (the program knows its task).
        return [
            dataclasses.replace(plan, items=None, array_limit=None)
            if plan.items == (0,) or (plan.items and plan.name in _PARTITIONED and self.override_task_id is not None)
            else plan
            for plan in plans
        ]

    def reads(self) -> list[tuple[str, str]]:
        """Inputs on this filesystem that no earlier sub-stage of this run writes."""
        paths = []
        first = next(name for name in STEP_ORDER if getattr(self, name).enable)
        if first == "download_parquet" and self.dataset_repo_url.startswith("file://"):
            paths.append((f"{STAGE}.dataset_repo_url", self.dataset_repo_url[len("file://") :]))
        elif first in ("download_images", "reorganize_tar", "precache_encodings", "generate_wdinfo"):
            paths.append((f"{STAGE}.{first}.input_dir", getattr(self, first).input_dir))
        if self.precache_encodings.enable:
            paths.append(
                (f"{STAGE}.precache_encodings.precache_config_path", self.precache_encodings.precache_config_path)
            )
        return paths

    def writes(self) -> list[str]:
        outputs = [self.run.results_dir, self.dataset_output_root]
        outputs += [getattr(self, name).output_dir for name in STEP_ORDER[:-1] if getattr(self, name).enable]
        if self.generate_wdinfo.enable:
            outputs.append(self.generate_wdinfo.output_wdinfo_path)
        if self.generate_shapes.enable and self.generate_shapes.class_folders:
            outputs.append(self.generate_shapes.class_folders)
        return outputs


# The steps whose partition node_array_size and the overrides set; download_images has one task per parquet file.
_PARTITIONED = ("reorganize_tar", "precache_encodings")
STEP_ORDER = (
    "generate_shapes",
    "download_parquet",
    "download_images",
    "reorganize_tar",
    "precache_encodings",
    "generate_wdinfo",
)


# ---- the precache spec (precache_encodings.precache_config_path), bound by the precache program ------------------
@dataclasses.dataclass(frozen=True)
class EncodingSpec:
    modality: Literal["image", "text"]
    extension: str  # the source member it encodes, without the dot: jpg, txt
    key: str  # its name in each example's .pickle, e.g. clip-vit-large-patch14_text
    precision: Literal[16, 32]  # stored as float16 or float32
    # `cls`: the dotted class path; every other key is a constructor argument. The class has encode() or __call__()
    # taking a list of PIL images or of strings, and returning a tensor, or (tensor, mask) for text without pads.
    encoder_config: dict[str, Any]
    store_pad_tokens: bool = True  # text: False keeps only the tokens the encoder's mask marks

    def check(self, key: str) -> None:
        cls = self.encoder_config.get("cls")
        if not isinstance(cls, str) or "." not in cls:
            raise config_fault(f"{key}.encoder_config.cls", cls, "name the encoder class as module.Class")
        if not self.key or "/" in self.key:
            raise field_fault(self, key, "key", "a name such as clip-vit-large-patch14_text")
        if self.extension.startswith("."):
            raise field_fault(self, key, "extension", f"write it without the dot: {self.extension[1:]}")


@dataclasses.dataclass(frozen=True)
class PrecacheSpec:
    encodings: list[EncodingSpec]
    batch_size_per_GPU: int = 64  # examples encoded at once by one process
    save_original_in_tar: list[Literal["image", "text"]] = dataclasses.field(default_factory=list)  # copied as they are

    def check(self, key: str) -> None:
        positive(f"{key}.batch_size_per_GPU", self.batch_size_per_GPU)
        if not self.encodings:
            raise field_fault(self, key, "encodings", "list at least one encoding")
        keys = [encoding.key for encoding in self.encodings]
        repeated = sorted({name for name in keys if keys.count(name) > 1})
        if repeated:
            raise config_fault(f"{key}.encodings", repeated, "each encoding needs its own key")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> "PrecacheSpec":
        return bind(cls, data, source)
