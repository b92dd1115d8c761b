"""Schemas of the resolved `conversion` sections of the vision families (conf/conversion/vit/convert_vit.yaml,
conf/conversion/clip/convert_clip.yaml): a ViT or CLIP training checkpoint -> `<results_dir>/results/<nemo_file_name>`
(nemo_vit.nemo, nemo_clip.nemo) at the TP asked for, resharded from the TP it was trained with. CLIP runs trained
with EMA convert the average (what they validated and wrote at the end). The keys are every family's
(common_conversion, the seed's model.checkpoint_folder, checkpoint_name, hparams_file); ViT and CLIP have no
pipeline stages and no merges-file override of their own beyond CLIP's BPE.

    cfg = ClipConversionConfig.from_dict(section)     # the launcher before submitting; the job when it starts

`hf`: CLIP alone has a Hugging Face counterpart (transformers' CLIPModel), written where the architecture matches
exactly (the job says why not otherwise); a ViT conversion has none, so its hf.mode must be off.
"""

import dataclasses
from typing import ClassVar, Literal

from ..binding import config_fault, field_fault, no_pipeline_parallel
from .common_conversion import CheckpointSourceBase, ConversionRunBase, ConversionStage, HFSection


def _check_single_stage(model, key: str) -> None:
    no_pipeline_parallel(model, key, "ViT and CLIP have no pipeline parallelism (the seed's feature matrix): set 1")
    if model.tokenizer_model is not None:
        raise field_fault(model, key, "tokenizer_model", "the vision families read no SentencePiece model: set null")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VitConversionRun(ConversionRunBase):
    example_nemo: ClassVar[str] = "nemo_vit.nemo"


@dataclasses.dataclass(frozen=True)
class VitConversionModel(CheckpointSourceBase):
    model_type: Literal["vit_classification"] = "vit_classification"

    def check(self, key: str) -> None:
        super().check(key)
        _check_single_stage(self, key)
        for name in ("vocab_file", "merge_file"):
            if getattr(self, name) is not None:
                raise config_fault(f"{key}.{name}", getattr(self, name), "a ViT reads no text: set null")


@dataclasses.dataclass(frozen=True)
class VitConversionConfig(ConversionStage):
    run: VitConversionRun
    model: VitConversionModel
    hf: HFSection = HFSection(mode="off")

    def check(self, key: str) -> None:
        super().check(key)
        if self.hf.mode != "off":
            raise config_fault(
                f"{key}.hf.mode",
                self.hf.mode,
                "the ViT classifier (megatron's class tokens and tanh head) has no Hugging Face "
                "counterpart here: set off",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClipConversionRun(ConversionRunBase):
    example_nemo: ClassVar[str] = "nemo_clip.nemo"


@dataclasses.dataclass(frozen=True)
class ClipConversionModel(CheckpointSourceBase):
    model_type: Literal["megatron_clip"] = "megatron_clip"

    def check(self, key: str) -> None:
        super().check(key)
        _check_single_stage(self, key)


@dataclasses.dataclass(frozen=True)
class ClipConversionConfig(ConversionStage):
    run: ClipConversionRun
    model: ClipConversionModel
    hf: HFSection = HFSection()  # transformers' CLIPModel where it computes the same embeddings
