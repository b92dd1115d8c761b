"""`search_config.train_settings`, read once and checked before anything is written.

A bad value stops the run with one line, `search_config.train_settings.<key>=<value>: <fix>`, exit 2 (ConfigError).
List keys take `auto` (the seed's heuristics choose, grid.py) or a list of positive integers.
"""

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from ..errors import config_error

PREFIX = "search_config.train_settings"
GPU_TYPES_BY_MEMORY = {40: "a100-40gb", 80: "a100-80gb"}


@dataclass(frozen=True)
class TrainSettings:
    model_size_in_b: float | None  # None: recommend one (or take base_training's model)
    num_nodes: int  # nodes of every candidate run
    gpus_per_node: int  # processes per node of every candidate run
    gpu_memory_gb: int
    gpu_type: str  # the performance model's profile (cpu: measured on this machine when the search starts)
    max_training_days: float
    limit_search_runs: int  # most candidates launched
    max_parallel_runs: int | None  # most candidates running at once on Slurm; None: all (the seed's way)
    output_top_n: int
    max_steps_per_run: int
    max_minutes_per_run: int
    tflops_per_gpu: float
    num_tokens_in_b: float
    vocab_size: int
    seq_length: int
    logs: Path  # everything the search writes goes under here
    base_training: str | None  # a training config (family/name) the base config starts from
    global_batch_size: int | None  # None: the seed's table
    tensor_parallel_sizes: tuple[int, ...] | None  # None: auto
    pipeline_parallel_sizes: tuple[int, ...] | None
    virtual_pipeline_parallel_sizes: tuple[int, ...] | None
    context_parallel_sizes: tuple[int, ...] | None
    min_model_parallel_size: int | None
    max_model_parallel_size: int | None
    micro_batch_sizes: tuple[int, ...] | None
    act_ckpt_layers: tuple[int, ...] | None  # 0: selective recomputation; k > 0: full recomputation of k layers

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


def _positive(key: str, value, kind=int, allow_zero: bool = False):
    number = value
    if isinstance(value, str) and kind is int and value.strip().isdigit():
        number = int(value)
    ok_types = (int, float) if kind is float else (int,)
    if isinstance(number, bool) or not isinstance(number, ok_types) or number < 0 or (number == 0 and not allow_zero):
        hint = " (on Base Command Platform run this command inside the NGC job, where NGC_ARRAY_SIZE is set)"
        raise config_error(
            f"{PREFIX}.{key}",
            value,
            f"must be a {'non-negative' if allow_zero else 'positive'} {'number' if kind is float else 'integer'}"
            + (hint if key == "num_nodes" else ""),
        )
    return number


def _auto_or_int(key: str, value) -> int | None:
    return None if value == "auto" else _positive(key, value)


def _auto_or_list(key: str, value, allow_zero: bool = False) -> tuple[int, ...] | None:
    if value == "auto":
        return None
    if not isinstance(value, (list, tuple, ListConfig)) or not value:
        raise config_error(f"{PREFIX}.{key}", value, "give auto or a non-empty list of integers, e.g. [1, 2, 4]")
    return tuple(sorted({_positive(key, item, allow_zero=allow_zero) for item in value}))


def read_settings(cfg: DictConfig) -> TrainSettings:
    section = OmegaConf.select(cfg, PREFIX)
    if section is None:
        raise config_error(PREFIX, None, "the search config needs a train_settings section (see search_config/gpt3/5b)")
    raw = OmegaConf.to_container(section, resolve=True)
    size = raw.get("model_size_in_b")
    memory = _positive("gpu_memory_gb", raw.get("gpu_memory_gb"))
    gpu_type = raw.get("gpu_type", "auto")
    if gpu_type == "auto":
        if memory not in GPU_TYPES_BY_MEMORY:
            raise config_error(f"{PREFIX}.gpu_memory_gb", memory, "the seed's A100s have 40 or 80; or set gpu_type")
        gpu_type = GPU_TYPES_BY_MEMORY[memory]
    base = raw.get("base_training")
    settings = TrainSettings(
        model_size_in_b=None if size is None else _positive("model_size_in_b", size, float),
        num_nodes=_positive("num_nodes", raw.get("num_nodes")),
        gpus_per_node=_positive("gpus_per_node", raw.get("gpus_per_node")),
        gpu_memory_gb=memory,
        gpu_type=str(gpu_type),
        max_training_days=_positive("max_training_days", raw.get("max_training_days"), float),
        limit_search_runs=_positive("limit_search_runs", raw.get("limit_search_runs")),
        max_parallel_runs=None
        if raw.get("max_parallel_runs") is None
        else _positive("max_parallel_runs", raw.get("max_parallel_runs")),
        output_top_n=_positive("output_top_n", raw.get("output_top_n")),
        max_steps_per_run=_positive("max_steps_per_run", raw.get("max_steps_per_run")),
        max_minutes_per_run=_positive("max_minutes_per_run", raw.get("max_minutes_per_run")),
        tflops_per_gpu=_positive("tflops_per_gpu", raw.get("tflops_per_gpu"), float),
        num_tokens_in_b=_positive("num_tokens_in_b", raw.get("num_tokens_in_b"), float),
        vocab_size=_positive("vocab_size", raw.get("vocab_size")),
        seq_length=_positive("seq_length", raw.get("seq_length", 2048)),
        logs=Path(str(raw.get("logs"))),
        base_training=None if base is None else str(base),
        global_batch_size=_auto_or_int("global_batch_size", raw.get("global_batch_size", "auto")),
        tensor_parallel_sizes=_auto_or_list("tensor_parallel_sizes", raw.get("tensor_parallel_sizes", "auto")),
        pipeline_parallel_sizes=_auto_or_list("pipeline_parallel_sizes", raw.get("pipeline_parallel_sizes", "auto")),
        virtual_pipeline_parallel_sizes=_auto_or_list(
            "virtual_pipeline_parallel_sizes", raw.get("virtual_pipeline_parallel_sizes", "auto")
        ),
        context_parallel_sizes=_auto_or_list("context_parallel_sizes", raw.get("context_parallel_sizes", "auto")),
        min_model_parallel_size=_auto_or_int("min_model_parallel_size", raw.get("min_model_parallel_size", "auto")),
        max_model_parallel_size=_auto_or_int("max_model_parallel_size", raw.get("max_model_parallel_size", "auto")),
        micro_batch_sizes=_auto_or_list("micro_batch_sizes", raw.get("micro_batch_sizes", "auto")),
        act_ckpt_layers=_auto_or_list("act_ckpt_layers", raw.get("act_ckpt_layers", "auto"), allow_zero=True),
    )
    if (
        settings.min_model_parallel_size is not None
        and settings.max_model_parallel_size is not None
        and settings.min_model_parallel_size > settings.max_model_parallel_size
    ):
        raise config_error(
            f"{PREFIX}.min_model_parallel_size",
            settings.min_model_parallel_size,
            f"is above max_model_parallel_size={settings.max_model_parallel_size}: lower it or raise the maximum",
        )
    return settings
