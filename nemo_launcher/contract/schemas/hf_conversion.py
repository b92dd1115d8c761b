"""Schema of the resolved `conversion_hf2nemo` section (conf/conversion_hf2nemo/<family>/<name>.yaml): a Hugging Face
model folder -> one GPT `.nemo` and a megatron-core distributed checkpoint, both in the TP x PP layout asked for.

    cfg = HFImportConfig.from_dict(section)    # the launcher before submitting; the import job when it starts
    cfg.folder().model_section()               # the GPT `model:` keys, or the one-line refusal

Binding reads the folder's config.json and safetensors headers when the folder exists (contract/hf_architectures.py):
an architecture or setting the converter cannot represent exactly is refused at launch. A folder an earlier stage
of the pipeline writes is read by the job, which binds the same schema when it starts.
"""

import dataclasses
from pathlib import Path
from typing import Literal

from ..binding import (
    JobConfigError,
    StageSchema,
    absolute_path_fields,
    bind,
    config_fault,
    field_fault,
    positive_fields,
)
from ..hf_architectures import CONFIG_FILE, HFFolder, imported_model_config
from .gpt_training import ModelSection
from .run import RunBase

STAGE = "conversion_hf2nemo"
CHECKPOINT_STEP = 0  # the imported weights are step 0 of the checkpoints/ folder the job writes


@dataclasses.dataclass(frozen=True, kw_only=True)
class HFImportRun(RunBase):
    huggingface_ckpt_path: str  # the Hugging Face folder: config.json, model.safetensors (or shards), tokenizer files
    nemo_file_name: str  # the .nemo goes to <results_dir>/results/<nemo_file_name>
    nodes: int = 1  # nodes of the job; the config derives it from TP x PP and cluster.gpus_per_node
    ntasks_per_node: int = 1  # processes per node
    convert_name: str | None = None  # last folder of results_dir
    model_train_name: str | None = None  # names the default paths, as a training run's name does
    train_dir: str | None = None  # the folder holding results_dir

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "nodes", "ntasks_per_node")
        absolute_path_fields(self, key, "huggingface_ckpt_path")
        if not self.nemo_file_name.endswith(".nemo") or "/" in self.nemo_file_name:
            raise field_fault(self, key, "nemo_file_name", "a file name ending in .nemo, such as llama2_7b.nemo")


@dataclasses.dataclass(frozen=True)
class HFImportModel:
    tensor_model_parallel_size: int = 1  # TP of the .nemo and of the distributed checkpoint (and of this job)
    pipeline_model_parallel_size: int = 1  # PP of both
    model_parallel_size: int | None = None  # TP x PP, for the launcher's node count; checked if set
    precision: Literal["fp32", "bf16", "fp16"] | None = None  # dtype of the written weights; null = as stored

    def check(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size", "pipeline_model_parallel_size")
        tp, pp = self.tensor_model_parallel_size, self.pipeline_model_parallel_size
        if self.model_parallel_size is not None and self.model_parallel_size != tp * pp:
            raise field_fault(self, key, "model_parallel_size", f"must equal TP({tp}) x PP({pp}) = {tp * pp}")


@dataclasses.dataclass(frozen=True)
class HFImportConfig(StageSchema, stage=STAGE):
    run: HFImportRun
    model: HFImportModel = HFImportModel()

    def check(self, key: str) -> None:
        processes = self.run.nodes * self.run.ntasks_per_node
        tp, pp = self.model.tensor_model_parallel_size, self.model.pipeline_model_parallel_size
        if processes % (tp * pp):
            raise config_fault(
                f"{key}.run.ntasks_per_node",
                self.run.ntasks_per_node,
                f"nodes({self.run.nodes}) x ntasks_per_node({self.run.ntasks_per_node}) = {processes} processes "
                f"cannot hold TP({tp}) x PP({pp}) = {tp * pp} ranks evenly; make it a multiple",
            )
        if (Path(self.run.huggingface_ckpt_path) / CONFIG_FILE).exists():
            self.model_config()

    def folder(self) -> HFFolder:
        return HFFolder.read(self.run.huggingface_ckpt_path, f"{self.stage}.run.huggingface_ckpt_path")

    def model_config(self) -> dict:
        """The GPT `model:` section the .nemo stores, bound to the GPT schema here, as every GPT job binds it."""
        folder = self.folder()
        config = imported_model_config(
            folder, self.model.tensor_model_parallel_size, self.model.pipeline_model_parallel_size
        )
        self._check_split(config, folder)
        if self.model.precision is None:
            folder.dtype()  # the weights are written as stored: a dtype of ours
        try:
            bind(ModelSection, config, "model")
        except JobConfigError as error:
            raise folder.refuse(f"our GPT cannot hold this model ({error})") from None
        return config

    def _check_split(self, config: dict, folder: HFFolder) -> None:
        """TP splits whole heads, query groups and hidden units (megatron-core's rule); PP whole layers."""
        tp, pp = self.model.tensor_model_parallel_size, self.model.pipeline_model_parallel_size
        split = {name: config[name] for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size")}
        if any(size % tp for size in split.values()):
            sizes = ", ".join(f"{name}({size})" for name, size in split.items())
            raise config_fault(
                f"{self.stage}.model.tensor_model_parallel_size",
                tp,
                f"TP({tp}) must divide {sizes} of the model in {folder.path}; pick a TP that divides them",
            )
        if config["num_layers"] % pp:
            raise config_fault(
                f"{self.stage}.model.pipeline_model_parallel_size",
                pp,
                f"PP({pp}) must divide num_hidden_layers({config['num_layers']}) of the model in {folder.path}",
            )

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{self.stage}.run.huggingface_ckpt_path", self.run.huggingface_ckpt_path)]

    def writes(self) -> list[str]:
        return [self.run.results_dir]

    @property
    def nemo_path(self) -> Path:
        return Path(self.run.results_dir) / "results" / self.run.nemo_file_name

    @property
    def checkpoint_dir(self) -> Path:
        """The distributed checkpoint: checkpoints/step-0 (with its COMPLETE marker), as a training run lays out."""
        return Path(self.run.results_dir) / "results" / "checkpoints" / f"step-{CHECKPOINT_STEP}"
