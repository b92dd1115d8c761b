"""A pipeline checked as a whole: every downstream stage against the model it will load, before anything is written.

    models = PipelineModels(cfg, choices, names)      # pipeline.build_plan, before the first stage
    models.add("training", training_specs)            # after each stage bound its own section, in pipeline order
    models.add("conversion", conversion_specs)        # ConfigError (exit 2): `key=value: fix (the model (...) ...)`

The model a stage loads is the path its schema declares among its reads under a model key (restore_from_path,
nemo_model, checkpoint_folder, ...). Its facts (contract/model_facts.py) come from, in this order:
1. the earlier stage of this pipeline that writes that path (the one declaring the deepest folder holding it): the
   training's model, as each stage since passed it on (a ViT fine-tuned at 384 pixels is a 384-pixel model);
2. a file already on disk: a .nemo's model_config.yaml, or a training run's resolved <run.name>_hydra.yaml;
3. the training config the stage follows (its run.model_train_name is training.run.name), in the pipeline or not;
   with none of its family loaded, the family's config of the run it names (launch/default_training.py).
Where none applies nothing is known and the job checks what it opens. The rules are contract/model_rules.py's,
which the job programs can call as well. A path inside a training run's folder must also be one that run writes
(its checkpoints, or the .nemo its family saves), and a training reading a data preparation's output must use
its tokenizer.
"""

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..contract.binding import JobConfigError
from ..contract.hf_architectures import CONFIG_FILE as HF_CONFIG_FILE
from ..contract.hf_architectures import facts_of_hf_folder
from ..contract.lddl import check_prepared_bins
from ..contract.model_facts import ModelFacts, ModelFileError, facts_of_model, facts_of_nemo, facts_of_run_config
from ..contract.model_rules import (
    check_against_model,
    check_checkpoint_path,
    check_step_name,
    check_tokenizer,
    value_at,
)
from .default_training import training_section_of_run
from .errors import ConfigError, config_error
from .families import FAMILIES
from .job_spec import JobSpec

# The last part of a read's key when the read is the model itself (or the run config describing it).
MODEL_KEYS = (
    "restore_from_path",
    "nemo_model",
    "language_model_path",
    "checkpoint_path",
    "checkpoint_folder",
    "checkpoint_dir",
    "hparams_file",
    "training_config",
    "huggingface_ckpt_path",  # a Hugging Face folder that conversion_hf2nemo imports
)


@dataclasses.dataclass(frozen=True)
class TrainerFolder:
    """What a training or fine-tuning stage writes into its explicit_log_dir, for the paths later stages name
    inside it: checkpoints/step-<N> folders, and the .nemo it saves in checkpoints/ when it finishes."""

    log_dir: str
    nemo_file_name: str | None  # None: the run saves checkpoints only (GPT, T5, BERT, DiT training)
    max_steps: int | None
    every_n_steps: int | None
    keep: int | None  # save_top_k: complete checkpoints kept (-1: all)
    monitor: str | None  # what chooses the kept ones: step (the newest) or a validation metric


@dataclasses.dataclass(frozen=True)
class Output:
    """An earlier stage of the pipeline: the model it leaves behind and the places it writes."""

    stage: str
    facts: ModelFacts | None
    places: tuple[str, ...]  # folders its schema declares and the files the launcher writes for it
    files: tuple[str, ...]  # of those, the files the launcher writes (its resolved config)
    trainer: TrainerFolder | None = None


@contextlib.contextmanager
def _refused_at_launch():
    """A contract rule's JobConfigError as the launcher's one-line ConfigError (exit 2)."""
    try:
        yield
    except JobConfigError as error:
        raise ConfigError(str(error)) from None


def _section(cfg: DictConfig, name: str) -> dict[str, Any]:
    return OmegaConf.to_container(cfg[name], resolve=True)


def _inside(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip("/") + "/")


def _writer(path: str, outputs: Sequence[Output]) -> Output | None:
    """The stage that writes `path`: the deepest declared place holding it, the later stage on a tie."""
    best, depth = None, -1
    for output in outputs:
        for place in output.places:
            if _inside(path, place) and len(PurePosixPath(place).parts) >= depth:
                best, depth = output, len(PurePosixPath(place).parts)
    return best


def _trainer_folder(stage: str, section: Mapping[str, Any], family: str) -> TrainerFolder | None:
    """A training's folder (its family row names the .nemo it saves) or a fine-tuning's (<exp_manager.name>.nemo,
    schemas/common_tuning.py); None for the other stages, whose outputs are named by their own keys."""
    log_dir = value_at(section, "exp_manager.explicit_log_dir")
    if stage not in ("training", "fine_tuning") or not isinstance(log_dir, str):
        return None
    row = FAMILIES.get(family)
    name = value_at(section, "exp_manager.name")
    return TrainerFolder(
        log_dir=log_dir,
        nemo_file_name=(row.training_nemo_file_name if row else None) if stage == "training" else f"{name}.nemo",
        max_steps=value_at(section, "trainer.max_steps"),
        every_n_steps=value_at(section, "exp_manager.checkpoint_callback_params.every_n_train_steps"),
        keep=value_at(section, "exp_manager.checkpoint_callback_params.save_top_k"),
        monitor=value_at(section, "exp_manager.checkpoint_callback_params.monitor") or "step",
    )


def _files(specs: Sequence[JobSpec]) -> tuple[str, ...]:
    return tuple(str(path) for spec in specs for path, _ in spec.files)


def _places(specs: Sequence[JobSpec]) -> tuple[str, ...]:
    return tuple(place for spec in specs for place in spec.writes) + _files(specs)


def _on_disk(key: str, path: str) -> ModelFacts | None:
    """The facts of a model file that is already there: a .nemo, a training run's resolved config, or a Hugging
    Face folder (its config.json)."""
    file = Path(path)
    if file.is_dir() and (file / HF_CONFIG_FILE).is_file():
        with _refused_at_launch():
            return facts_of_hf_folder(file, key)
    if not file.is_file():
        return None
    try:
        if file.suffix in (".yaml", ".yml"):
            return facts_of_run_config(file, str(file))
        return facts_of_nemo(file)
    except ModelFileError as error:
        raise config_error(key, path, str(error)) from None


class PipelineModels:
    """Walks the stages in order, keeping what each leaves behind, and checks each against what it loads."""

    def __init__(self, cfg: DictConfig, choices: Mapping[str, str | None], names: Sequence[str]):
        self.cfg = cfg
        self.choices = choices
        self.names = tuple(names)
        self.outputs: list[Output] = []
        self.loaded: dict[str, ModelFacts] = {}  # stage -> the model it loads, where known (predictions use it)
        self._followed: tuple[str, ModelFacts, dict[str, Any]] | None | bool = False  # False: not read yet

    @property
    def followed(self) -> tuple[str, ModelFacts, dict[str, Any]] | None:
        """(run name, facts, section) of the training config downstream stages follow, when one is loaded. Read
        when first needed: by then a training stage of the pipeline has passed its own checks."""
        if self._followed is False:
            self._followed = self._read_followed_training()
        return self._followed

    def _read_followed_training(self) -> tuple[str, ModelFacts, dict[str, Any]] | None:
        if self.cfg.get("training") is None:
            return None
        try:
            training = _section(self.cfg, "training")
        except OmegaConfBaseException:
            # Only a training config outside the pipeline gets here (the pipeline's own was resolved by its stage):
            # what it cannot resolve is no fact about the model, and it will not run.
            return None
        model = training.get("model")
        if not isinstance(model, Mapping):
            return None
        where = "training stage of this pipeline" if "training" in self.names else "the training config it follows"
        source = f"{where}, training={self.choices.get('training')}"
        return str((training.get("run") or {}).get("name")), facts_of_model(model, source), training

    def add(self, name: str, specs: Sequence[JobSpec]) -> None:
        """Checks stage `name` (already bound to its own schema) against its model; records what it leaves."""
        if name == "data_preparation":
            self.outputs.append(Output(name, None, _places(specs), _files(specs)))
            return
        section = _section(self.cfg, name)
        if name == "training":
            self._check_data_tokenizer(section, specs)
            facts = self.followed[1] if self.followed else None
        else:
            facts = self._loaded_model(name, section, specs)
            if facts is not None:
                self.loaded[name] = facts
                with _refused_at_launch():
                    check_against_model(facts, name, section)
                facts = _passed_on(facts, f"{name} stage of this pipeline, {name}={self.choices.get(name)}", section)
        family = str(self.choices.get(name) or "").rpartition("/")[0]
        folder = _trainer_folder(name, section, family)
        self.outputs.append(Output(name, facts, _places(specs), _files(specs), folder))

    def _loaded_model(self, name: str, section: Mapping[str, Any], specs: Sequence[JobSpec]) -> ModelFacts | None:
        reads = [(key, path) for spec in specs for key, path in spec.reads if key.rsplit(".", 1)[-1] in MODEL_KEYS]
        written = [(key, str(path), _writer(str(path), self.outputs)) for key, path in reads]
        written = [(key, path, writer) for key, path, writer in written if writer is not None and writer.facts]
        for key, path, writer in written:
            if writer.trainer is not None and path not in writer.files:
                self._check_trainer_path(
                    key, path, section, name, writer.trainer, f"the {writer.stage} stage of this pipeline"
                )
        if written:
            return written[0][2].facts
        for key, path in reads:
            facts = _on_disk(key, str(path))
            if facts is not None and facts.describes_a_model():
                return facts
        training = self._training_run_followed(name, value_at(section, "run.model_train_name"))
        if training is None:
            return None
        choice, facts, training_section, source = training
        run = _trainer_folder("training", training_section, choice.rpartition("/")[0])
        inside = [(key, str(path)) for key, path in reads if run is not None and _inside(str(path), run.log_dir)]
        for key, path in inside:
            self._check_trainer_path(key, path, section, name, run, source)
        if inside:
            return facts
        # A model the training run does not write itself (a fine-tuned one) keeps its architecture but may have
        # been tuned at another image size, which only the tuning stage's own config could say.
        return facts.replace(image=None)

    def _training_run_followed(self, name: str, run_name) -> tuple[str, ModelFacts, dict[str, Any], str] | None:
        """(choice, facts, section, how messages name it) of the training run a stage follows by name: the loaded
        training config, or, with none of the stage's family loaded, the family's config of that run."""
        if self.followed is not None:
            if run_name != self.followed[0]:
                return None
            _, facts, section = self.followed
            return str(self.choices.get("training")), facts, section, "the training config it follows"
        if self.cfg.get("training") is not None or not isinstance(run_name, str):
            return None
        family = str(self.choices.get(name) or "").rpartition("/")[0]
        family = FAMILIES[family].tunes or family if family in FAMILIES else family
        found = training_section_of_run(family, run_name)
        if found is None or not isinstance(found[1].get("model"), Mapping):
            return None
        choice, section = found
        source = f"the {family} family's config of run {run_name}, training={choice}"
        return choice, facts_of_model(section["model"], source), section, source

    def _check_trainer_path(self, key: str, path: str, section, name: str, run: TrainerFolder, source: str) -> None:
        """A path inside a trainer's folder names something that run writes, and a step it saves."""
        with _refused_at_launch():
            check_checkpoint_path(key, path, run.log_dir, source, run.nemo_file_name)
            step = value_at(section, "model.checkpoint_name")
            if isinstance(step, str):
                check_step_name(
                    f"{name}.model.checkpoint_name",
                    step,
                    run.max_steps,
                    run.every_n_steps,
                    source,
                    run.keep,
                    run.monitor,
                )

    def _check_data_tokenizer(self, training: Mapping[str, Any], specs: Sequence[JobSpec]) -> None:
        """A training that reads what this pipeline's data preparation writes must tokenize as it did (and fit its LDDL
        bins)."""
        tokenizer = value_at(training, "model.tokenizer")
        if not isinstance(tokenizer, Mapping):
            return
        for _, path in (read for spec in specs for read in spec.reads):
            writer = _writer(str(path), self.outputs)
            if writer is not None and writer.stage == "data_preparation":
                with _refused_at_launch():
                    data = _section(self.cfg, "data_preparation")
                    check_tokenizer(data, tokenizer, "training", "the data_preparation stage of this pipeline")
                    check_prepared_bins(data, training, "the data_preparation stage of this pipeline")
                return


def _passed_on(facts: ModelFacts, stage_source: str, section: Mapping[str, Any]) -> ModelFacts:
    """The model a stage leaves for the stages after it: the one it loaded, or, where it tuned at another image
    size (a ViT's positions interpolated to fine_tuning.model.img_h x img_w), a model of that size, which messages
    then say comes from this stage."""
    height, width = value_at(section, "model.img_h"), value_at(section, "model.img_w")
    if (
        facts.image is not None
        and isinstance(height, int)
        and isinstance(width, int)
        and facts.image != (height, width)
    ):
        return facts.replace(source=stage_source, image=(height, width))
    return facts
