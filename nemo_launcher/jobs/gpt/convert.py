"""Conversion: a training checkpoint (megatron-core distributed checkpoint) -> one `.nemo` file, and a
Hugging Face checkpoint where an architecture computes the same model exactly.

    python3 -u -m nemo_launcher.jobs.gpt.convert --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.convert --config ...     (target TP x PP = 2)

One process per rank of the target layout (model.tensor_model_parallel_size x pipeline_model_parallel_size;
more processes are allowed and idle). Each builds its part of the model and lets dist_checkpointing read
its slice of the checkpoint, whatever TP/PP the checkpoint was trained with: that is the resharding.
The result goes to <run.results_dir>/results/<run.nemo_file_name> (written under a temporary name and
renamed, so a stage chained after this one sees the whole file or none). Exit codes: 0 done,
2 configuration error (one line on stderr), anything else a crash.

Only the standard library is imported at module level, as in train.py: megatron's checkpoint code may
spawn a helper process that re-imports this module.
"""
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any, Dict, Literal, Optional

log = logging.getLogger("nemo_launcher.jobs.gpt.convert")

HF_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class ConversionRun:
    name: str
    results_dir: str  # the .nemo goes to <results_dir>/results/<nemo_file_name>
    nemo_file_name: str = "megatron_gpt.nemo"


@dataclasses.dataclass(frozen=True)
class ConversionModel:
    checkpoint_folder: str  # the training run's checkpoints/ folder, or one step-<N> folder in it
    hparams_file: str  # the training job's resolved config (<train_dir>/<run.name>_hydra.yaml)
    checkpoint_name: str = "latest"  # latest: newest complete step-<N>; or a folder name such as step-40
    model_type: Literal["gpt"] = "gpt"
    tensor_model_parallel_size: int = 1  # TP of the .nemo (and of this job)
    pipeline_model_parallel_size: int = 1  # PP of the .nemo
    model_parallel_size: Optional[int] = None  # TP x PP, for the launcher's node count; checked if set
    vocab_file: Optional[str] = None  # replaces model.tokenizer.vocab_file of training; null = as trained
    merge_file: Optional[str] = None  # replaces model.tokenizer.merge_file
    tokenizer_model: Optional[str] = None  # replaces model.tokenizer.model (SentencePiece or tokenizer.json)

    def check(self, key: str) -> None:
        from ..common.config import JobConfigError

        tp, pp = self.tensor_model_parallel_size, self.pipeline_model_parallel_size
        if tp < 1 or pp < 1:
            raise JobConfigError(f"{key}.tensor_model_parallel_size / pipeline_model_parallel_size: must be >= 1, got {tp} / {pp}")
        if self.model_parallel_size is not None and self.model_parallel_size != tp * pp:
            raise JobConfigError(f"{key}.model_parallel_size: {self.model_parallel_size} != TP({tp}) x PP({pp}) = {tp * pp}")


@dataclasses.dataclass(frozen=True)
class HFSection:
    mode: Literal["auto", "required", "off"] = "auto"  # auto: export if an architecture matches, else say why
    output_dir: Optional[str] = None  # null = <run.results_dir>/results/hf
    dtype: Optional[str] = None  # float32, bfloat16 or float16; null = the dtype the model was trained in

    def check(self, key: str) -> None:
        from ..common.config import JobConfigError

        if self.dtype is not None and self.dtype not in HF_DTYPES:
            raise JobConfigError(f"{key}.dtype: {self.dtype!r} is not one of {', '.join(HF_DTYPES)} (or null)")


@dataclasses.dataclass(frozen=True)
class ConversionConfig:
    run: ConversionRun
    model: ConversionModel
    hf: HFSection

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ConversionConfig":
        from ..common.config import JobConfigError, bind

        unknown = sorted(set(data) - {"run", "model", "hf"})
        if unknown:
            raise JobConfigError(f"{unknown[0]}: unknown section; a conversion config holds run, model, hf")
        return cls(run=bind(ConversionRun, data.get("run"), "run", strict=False),
                   model=bind(ConversionModel, data.get("model"), "model"),
                   hf=bind(HFSection, data.get("hf"), "hf"))

    @property
    def nemo_path(self) -> Path:
        return Path(self.run.results_dir) / "results" / self.run.nemo_file_name

    @property
    def hf_dir(self) -> Path:
        return Path(self.hf.output_dir) if self.hf.output_dir else Path(self.run.results_dir) / "results" / "hf"


def find_checkpoint(folder: str, name: str) -> Path:
    """The checkpoint to convert: `folder` itself when it is a complete step folder, else by `name` in it."""
    from ..common.config import JobConfigError
    from .checkpoints import MARKER, CheckpointFolder

    root = Path(folder)
    if (root / MARKER).is_file():
        return root
    checkpoints = CheckpointFolder(root)
    if name == "latest":
        newest = checkpoints.newest_complete()
        if newest is None:
            raise JobConfigError(f"model.checkpoint_folder: {root} holds no complete checkpoint (a step-<N> folder "
                                 f"with a {MARKER} marker); did the training run save one?")
        return newest
    chosen = root / name
    if not (chosen / MARKER).is_file():
        have = ", ".join(f"step-{s}" for s in checkpoints.steps()) or "none"
        raise JobConfigError(f"model.checkpoint_name: {chosen} is not a complete checkpoint; complete ones: {have}")
    return chosen


def training_model_section(cfg: ConversionConfig) -> Dict[str, Any]:
    """The training run's `model:` section (with any tokenizer file overrides) and its precision name."""
    from ..common.config import JobConfigError, load_resolved_config
    from .config import TrainingConfig

    try:
        training = load_resolved_config(Path(cfg.model.hparams_file))
    except JobConfigError as error:
        raise JobConfigError(f"model.hparams_file: {error}") from None
    try:
        parsed = TrainingConfig.from_dict(training)
    except JobConfigError as error:
        raise JobConfigError(f"model.hparams_file: {cfg.model.hparams_file}: {error}") from None
    model = dict(training["model"])
    tokenizer = dict(model["tokenizer"])
    for key, value in (("vocab_file", cfg.model.vocab_file), ("merge_file", cfg.model.merge_file),
                       ("model", cfg.model.tokenizer_model)):
        if value is not None:
            tokenizer[key] = value
    model["tokenizer"] = tokenizer
    return {"model": model, "precision": parsed.trainer.precision_name()}


def main(argv=None) -> int:
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config

    try:
        path = config_path_from_argv(argv, prog="python3 -m nemo_launcher.jobs.gpt.convert")
        cfg = ConversionConfig.from_dict(load_resolved_config(path))
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout)
        for noisy in ("megatron", "torch.distributed"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        from .converter import convert

        convert(cfg)
        return 0
    except JobConfigError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
