"""Schema of `evaluation=stable_diffusion/fid_clip`: images generated for COCO captions at several classifier-free
guidance scales, scored by FID against the real images and by CLIP score against their captions, and plotted.

    cfg = FidClipConfig.from_dict(section, "evaluation")
    cfg.steps()      # generate (array) -> fid -> clip -> plot, each `nemo_launcher.jobs.fid_evaluation.<step>`

| step | shape | reads | writes |
|---|---|---|---|
| generate | array of run.node_array_size tasks (below) | model, captions | fid.save_path/cfg<scale>/<caption>.png |
| fid | one process, one GPU | real images, generated, Inception | fid_scores.csv |
| clip | one process, one GPU | generated, captions, CLIP folder | clip_scores.csv |
| plot | one process, no GPU | both CSV files | fid_clip_plot.pdf (+ quality_targets.json with targets) |

With a `reference_data` section (the keys of data_preparation=fid_evaluation/*, without `run`; the tiny config), a
first step `reference_data` writes that reference set (generated COCO stand-in, random scorers, preprocessing) before
generate, so a pipeline whose one data_preparation stage prepares the training data can still evaluate.

Each step waits for the whole step before it (afterok). generate is an array of run.node_array_size =
len(cfgs) x nnodes_per_cfg tasks, run.ntasks_per_node processes each: array task i generates guidance scale
classifier_free_guidance[i // nnodes_per_cfg], share i % nnodes_per_cfg of the captions; its processes split that
share again. The CSV files and the plot go into run.results_dir.
"""

import dataclasses

from ..binding import StageSchema, config_fault, field_fault, positive, positive_fields
from .data_preparation import StepPlan
from .fid_evaluation_data import CocoReferenceData
from .run import RunBase
from .sd_inference import InferenceModel, InferenceTrainer, InferSection

STAGE = "evaluation"
FID_SCORES, CLIP_SCORES, PLOT = "fid_scores.csv", "clip_scores.csv", "fid_clip_plot.pdf"
TARGETS_REPORT = "quality_targets.json"
STEP_SWITCHES = (
    ("generate", "generate_images"),
    ("fid", "compute_fid_scores"),
    ("clip", "compute_clip_scores"),
    ("plot", "plot_fid_clip"),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FidClipRun(RunBase):
    model_train_name: str | None = None
    task_name: str = "fid_clip"
    node_array_size: int = 8  # generate's array tasks: len(fid.classifier_free_guidance) x fid.nnodes_per_cfg
    ntasks_per_node: int = 8  # processes (GPUs) of one generate task

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "node_array_size", "ntasks_per_node")


@dataclasses.dataclass(frozen=True)
class FidSection:
    coco_captions_path: str  # one <name>.txt caption per file (data_preparation=fid_evaluation/* writes them)
    coco_images_path: str  # the real images FID compares with
    save_path: str  # generated images: <save_path>/cfg<scale>/<caption name>.png
    classifier_free_guidance: list[float] = dataclasses.field(default_factory=lambda: [1.5, 2, 3, 4, 5, 6, 7, 8])
    nnodes_per_cfg: int = 1  # array tasks sharing one guidance scale's captions
    ntasks_per_node: int = 8  # the seed's echo of run.ntasks_per_node
    local_task_id: int | None = None  # play this array task alone (to redo one), instead of Slurm's
    num_images_to_eval: int = 30000  # captions used (the first ones, in name order)
    image_size: int = 256  # FID and CLIP score read every image at this square size (the seed scores at 256)

    def check(self, key: str) -> None:
        positive_fields(self, key, "nnodes_per_cfg", "num_images_to_eval", "image_size")
        if not self.classifier_free_guidance:
            raise field_fault(self, key, "classifier_free_guidance", "list at least one scale")
        if len(set(self.classifier_free_guidance)) != len(self.classifier_free_guidance):
            raise field_fault(self, key, "classifier_free_guidance", "list each scale once")
        for scale in self.classifier_free_guidance:
            if scale < 0:
                raise field_fault(self, key, "classifier_free_guidance", "scales are 0 or more")


@dataclasses.dataclass(frozen=True)
class QualityTargets:
    """A benchmark's quality bar (MLPerf SD v2: FID <= 90 and CLIP score >= 0.15): the plot step draws it and
    reports, per guidance scale, which targets the scores meet (quality_targets.json)."""

    fid: float | None = None  # met when FID is at most this
    clip_score: float | None = None  # met when the CLIP score is at least this

    def check(self, key: str) -> None:
        if self.fid is None and self.clip_score is None:
            raise config_fault(f"{key}.fid", None, "set fid and/or clip_score, or drop targets")
        if self.fid is not None and self.fid <= 0:
            raise field_fault(self, key, "fid", "an FID target is a positive distance")

    def met(self, fid: float, clip_score: float) -> dict[str, bool]:
        verdict = {}
        if self.fid is not None:
            verdict["fid_met"] = fid <= self.fid
        if self.clip_score is not None:
            verdict["clip_score_met"] = clip_score >= self.clip_score
        verdict["all_met"] = all(verdict.values())
        return verdict


@dataclasses.dataclass(frozen=True)
class FidClipConfig(StageSchema, stage=STAGE):
    run: FidClipRun
    fid: FidSection
    infer: InferSection
    model: InferenceModel
    inception_weights_path: str  # torch-fidelity's Inception state dict (weights-inception-2015-12-05-6726825d.pth)
    clip_model_path: str  # a transformers CLIPModel folder with its tokenizer and image processor
    clip_version: str = "ViT-L-14"  # the CLIP that clip_model_path holds, as the CSV and the plot name it
    trainer: InferenceTrainer = InferenceTrainer()
    generate_images: bool = True
    compute_fid_scores: bool = True
    compute_clip_scores: bool = True
    plot_fid_clip: bool = True
    reference_data: CocoReferenceData | None = None  # prepared by this evaluation's first step when given
    targets: QualityTargets | None = None  # reported by the plot step

    def check(self, key: str) -> None:
        if not any(getattr(self, switch) for _, switch in STEP_SWITCHES):
            raise config_fault(f"{key}.generate_images", False, "every sub-stage is disabled; enable one")
        if self.targets is not None and not self.plot_fid_clip:
            raise config_fault(
                f"{key}.plot_fid_clip",
                False,
                "the plot step reports the targets: set plot_fid_clip=True or drop targets",
            )
        self._check_reference(key)
        expected = len(self.fid.classifier_free_guidance) * self.fid.nnodes_per_cfg
        if self.generate_images and self.run.node_array_size != expected:
            raise config_fault(
                f"{key}.run.node_array_size",
                self.run.node_array_size,
                f"must be len(fid.classifier_free_guidance) x fid.nnodes_per_cfg = "
                f"{len(self.fid.classifier_free_guidance)} x {self.fid.nnodes_per_cfg} = {expected}",
            )
        if self.fid.local_task_id is not None and not 0 <= self.fid.local_task_id < self.run.node_array_size:
            raise config_fault(
                f"{key}.fid.local_task_id",
                self.fid.local_task_id,
                f"an array task of run.node_array_size={self.run.node_array_size} is 0-{self.run.node_array_size - 1}",
            )
        if self.trainer.devices != self.run.ntasks_per_node:
            raise config_fault(
                f"{key}.trainer.devices",
                self.trainer.devices,
                f"one process per GPU: must equal run.ntasks_per_node ({self.run.ntasks_per_node})",
            )
        positive(f"{key}.infer.num_images_per_prompt", self.infer.num_images_per_prompt)
        if self.infer.num_images_per_prompt != 1:
            raise config_fault(
                f"{key}.infer.num_images_per_prompt",
                self.infer.num_images_per_prompt,
                "FID/CLIP pairs one image with each caption: set 1",
            )

    def _check_reference(self, key: str) -> None:
        """The reference step must write what the later steps read, or it prepares a set nobody scores against."""
        data = self.reference_data
        if data is None:
            return
        pairs = [
            ("fid.coco_images_path", self.fid.coco_images_path, "images_output_dir", data.images_output_dir),
            ("fid.coco_captions_path", self.fid.coco_captions_path, "captions_output_dir", data.captions_output_dir),
        ]
        if data.standin_scorers.enable:
            pairs += [
                (
                    "inception_weights_path",
                    self.inception_weights_path,
                    "standin_scorers.inception_weights_path",
                    data.standin_scorers.inception_weights_path,
                ),
                (
                    "clip_model_path",
                    self.clip_model_path,
                    "standin_scorers.clip_model_path",
                    data.standin_scorers.clip_model_path,
                ),
            ]
        for used, value, written, path in pairs:
            if value != path:
                raise config_fault(
                    f"{key}.{used}",
                    value,
                    f"reference_data.{written} writes {path!r}: read that "
                    f"(or drop reference_data to read a set prepared before)",
                )

    def task_scale(self, task: int) -> tuple[float, int]:
        """(guidance scale, share of its captions) of generate's array task `task`."""
        return self.fid.classifier_free_guidance[task // self.fid.nnodes_per_cfg], task % self.fid.nnodes_per_cfg

    def steps(self) -> list[StepPlan]:
        gpus = self.trainer.accelerator == "gpu"
        plans = [StepPlan("reference_data", per_task=False)] if self.reference_data is not None else []
        if self.generate_images:
            tasks = self.run.node_array_size
            single = tasks == 1 or self.fid.local_task_id is not None
            plans.append(
                StepPlan(
                    "generate",
                    items=None if single else tuple(range(tasks)),
                    array_limit=None if single else tasks,
                    tasks_per_node=self.run.ntasks_per_node,
                    uses_gpus=gpus,
                    per_task=False,
                )
            )
        # FID and CLIP scoring run in one process on one GPU (the seed's sub-stages), not on the node's eight.
        if self.compute_fid_scores:
            plans.append(StepPlan("fid", uses_gpus=gpus, gpus_per_node=1, per_task=False))
        if self.compute_clip_scores:
            plans.append(StepPlan("clip", uses_gpus=gpus, gpus_per_node=1, per_task=False))
        if self.plot_fid_clip:
            plans.append(StepPlan("plot", per_task=False))
        return plans

    def reads(self) -> list[tuple[str, str]]:
        """Inputs on this filesystem that no earlier step of this evaluation writes."""
        paths = []
        if self.generate_images:
            paths += [
                (f"{STAGE}.model.restore_from_path", self.model.restore_from_path),
                (f"{STAGE}.fid.coco_captions_path", self.fid.coco_captions_path),
            ]
        elif self.compute_fid_scores or self.compute_clip_scores:
            paths.append((f"{STAGE}.fid.save_path", self.fid.save_path))
        if self.compute_fid_scores:
            paths += [
                (f"{STAGE}.fid.coco_images_path", self.fid.coco_images_path),
                (f"{STAGE}.inception_weights_path", self.inception_weights_path),
            ]
        if self.compute_clip_scores:
            paths += [
                (f"{STAGE}.fid.coco_captions_path", self.fid.coco_captions_path),
                (f"{STAGE}.clip_model_path", f"{self.clip_model_path}/config.json"),
            ]
        if self.reference_data is not None:
            written = self.reference_data.writes()
            paths = self.reference_data.reads(f"{STAGE}.reference_data") + [
                (key, path) for key, path in paths if not any(path == w or path.startswith(w + "/") for w in written)
            ]
        return list(dict.fromkeys(paths))

    def writes(self) -> list[str]:
        reference = self.reference_data.writes() if self.reference_data is not None else []
        return [self.run.results_dir, self.fid.save_path] + reference
