"""Model families are data: one row per family names, for each stage kind, the job program it runs, the schema
(in `nemo_launcher.contract.schemas`) that both the launcher and that program bind its config to, and the
single-process program that prepares its data first when the bound config asks for it.

The family of a config is the part of its choice before the last slash (`training=t5/220m` -> t5). Adding a
family adds a row here, its schemas, config files under conf/<stage>/<family>/ and a job package
(nemo_launcher/jobs/<family>/), never a branch in a stage class. Modules are named as strings: the launcher
imports a schema when it binds a stage and never imports a job program.
"""

from dataclasses import dataclass, field

from .errors import config_error

_SCHEMAS = "nemo_launcher.contract.schemas"
# Data preparation is one package of step programs (download, extract, preprocess, train_tokenizer, ...) and one
# schema that picks its dataclass by the config's `dataset`; every family's corpus goes through them.
_DATA_PREPARATION = "nemo_launcher.jobs.data"
_DATA_PREPARATION_SCHEMA = f"{_SCHEMAS}.data_preparation:DataPreparation"


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    programs: dict[str, str] = field(default_factory=dict)  # stage kind -> job program module
    schemas: dict[str, str] = field(default_factory=dict)  # stage kind -> "module:Class" with from_dict(section, stage)
    # stage kind -> program run as one process before the stage's job program, with the arguments the bound config's
    # preparation_args(config_file) gives (None there: the stage has nothing to prepare this time).
    preparers: dict[str, str] = field(default_factory=dict)
    # The .nemo the family's conversion writes into <train dir>/convert_nemo/results/, and its fine-tuning,
    # evaluation and export configs read by default (tests/launch/test_families.py holds the configs to it).
    nemo_file_name: str | None = None
    # The .nemo a finished training run of the family saves in <explicit_log_dir>/checkpoints/ (beside its step-<N>
    # folders), which its downstream configs read; None: the family's training writes checkpoints only.
    training_nemo_file_name: str | None = None
    # A config group prefix that evaluates another family's models tuned one way (prompt_gpt3 -> gpt3): its
    # configs follow that family's training run.
    tunes: str | None = None
    # program kind -> job program module, for stages that run more than one program (DPO's reference job, PPO's
    # roles): the stage class asks for these kinds by name.
    role_programs: dict[str, str] = field(default_factory=dict)


def _data_preparation_only(name: str, description: str) -> Family:
    return Family(
        name,
        description,
        programs={"data_preparation": _DATA_PREPARATION},
        schemas={"data_preparation": _DATA_PREPARATION_SCHEMA},
    )


def _tuned_evaluation(method: str, family: str, program: str, schema: str) -> Family:
    """evaluation=<method>_<family>/<task>: the frozen base of `family` with a prompt, adapter or IA3 result file."""
    return Family(
        f"{method}_{family}",
        f"evaluation of a {family} model tuned by {method} learning",
        programs={"evaluation": program},
        schemas={"evaluation": f"{_SCHEMAS}.tuned_evaluation:{schema}"},
        tunes=family,
    )


def _hf_import(name: str, architecture: str) -> Family:
    """conversion_hf2nemo=<name>/<config>: a Hugging Face folder of `architecture` -> our GPT .nemo and checkpoint.
    One program and schema for all: the folder's config.json, not the config group, says the architecture."""
    return Family(
        name,
        f"Hugging Face {architecture} folders imported as GPT .nemo files and checkpoints",
        programs={"conversion_hf2nemo": "nemo_launcher.jobs.gpt.hf_import"},
        schemas={"conversion_hf2nemo": f"{_SCHEMAS}.hf_conversion:HFImportConfig"},
    )


_SD_JOBS = "nemo_launcher.jobs.stable_diffusion"


def _stable_diffusion_variant(name: str, description: str, kind: str, inference: str, export_schema: str) -> Family:
    """A Stable Diffusion fine-tuning variant: its trainer (jobs.stable_diffusion.<name>_train, bound to
    sd_finetuning:<kind>TrainingConfig), its inference (`<program>:<sd_inference schema>`) and the SD export program
    (bound to sd_export:<export_schema>)."""
    program, inference_schema = inference.split(":")
    return Family(
        name,
        description,
        programs={
            "training": f"{_SD_JOBS}.{name}_train",
            "fw_inference": f"{_SD_JOBS}.{program}",
            "export": f"{_SD_JOBS}.export",
        },
        schemas={
            "training": f"{_SCHEMAS}.sd_finetuning:{kind}TrainingConfig",
            "fw_inference": f"{_SCHEMAS}.sd_inference:{inference_schema}",
            "export": f"{_SCHEMAS}.sd_export:{export_schema}",
        },
        training_nemo_file_name=f"nemo_{name}.nemo",
    )


# T5 and mT5 are one architecture: mT5 differs in its configs (sizes, mC4, a SentencePiece vocabulary), not in
# its programs or schemas.
_T5_PROGRAMS = {
    "data_preparation": _DATA_PREPARATION,
    "training": "nemo_launcher.jobs.t5.train",
    "conversion": "nemo_launcher.jobs.t5.convert",
    "fine_tuning": "nemo_launcher.jobs.t5.finetune",
    "peft": "nemo_launcher.jobs.t5.peft",
    "prompt_learning": "nemo_launcher.jobs.t5.prompt_learning",
    "adapter_learning": "nemo_launcher.jobs.t5.adapter_learning",
    "ia3_learning": "nemo_launcher.jobs.t5.ia3_learning",
    "evaluation": "nemo_launcher.jobs.t5.evaluate",
    "export": "nemo_launcher.jobs.t5.export",
}
_T5_SCHEMAS = {
    "data_preparation": _DATA_PREPARATION_SCHEMA,
    "training": f"{_SCHEMAS}.t5_training:T5TrainingConfig",
    "conversion": f"{_SCHEMAS}.t5_conversion:T5ConversionConfig",
    "fine_tuning": f"{_SCHEMAS}.t5_finetuning:T5FinetuneConfig",
    "peft": f"{_SCHEMAS}.gpt_sft:SftConfig",  # GPT's LoRA keys; the architecture comes from the .nemo
    # GPT's schema of the frozen-base methods: the architecture comes from the .nemo, the keys are the same.
    "prompt_learning": f"{_SCHEMAS}.gpt_prompt_learning:PromptLearningConfig",
    "adapter_learning": f"{_SCHEMAS}.gpt_prompt_learning:PromptLearningConfig",
    "ia3_learning": f"{_SCHEMAS}.gpt_prompt_learning:PromptLearningConfig",
    "evaluation": f"{_SCHEMAS}.t5_evaluation:QaEvaluationConfig",
    "export": f"{_SCHEMAS}.t5_export:T5ExportConfig",
}
# SQuAD-format JSON (SQuAD, XQuAD) -> source/target text files, before fine-tuning or evaluating on them; -> the
# prompt-learning jsonl (GPT's preparer) before the frozen-base methods, -> prompt/answer jsonl (GPT's too) before LoRA.
_T5_PREPARERS = {
    "fine_tuning": "nemo_launcher.jobs.t5.squad_data",
    "evaluation": "nemo_launcher.jobs.t5.squad_data",
    **{
        stage: "nemo_launcher.jobs.data.squad"
        for stage in ("peft", "prompt_learning", "adapter_learning", "ia3_learning")
    },
}

# GPT's programs and schemas also run the Llama-architecture families (llama, mistral, qwen2, mixtral): the GPT
# schema knows their rotary positions, SwiGLU, RMSNorm, grouped-query attention, q/k/v biases and experts.
_GPT_PROGRAMS = {
    "data_preparation": _DATA_PREPARATION,
    "training": "nemo_launcher.jobs.gpt.train",
    "conversion": "nemo_launcher.jobs.gpt.convert",
    "fine_tuning": "nemo_launcher.jobs.gpt.finetune",
    "peft": "nemo_launcher.jobs.gpt.peft",
    "prompt_learning": "nemo_launcher.jobs.gpt.prompt_learning",
    "adapter_learning": "nemo_launcher.jobs.gpt.adapter_learning",
    "ia3_learning": "nemo_launcher.jobs.gpt.ia3_learning",
    "evaluation": "nemo_launcher.jobs.gpt.evaluate",
    "export": "nemo_launcher.jobs.gpt.export",
    "conversion_nemo2hf": "nemo_launcher.jobs.gpt.export_hf",
    # RLHF: the reward model, DPO's trainer, PPO (named by its actor, the program that drives the other roles), and
    # their evaluation; the other programs of the DPO and PPO jobs are in _GPT_ROLE_PROGRAMS.
    "rlhf_rm": "nemo_launcher.jobs.gpt.rlhf_rm",
    "rlhf_dpo": "nemo_launcher.jobs.gpt.rlhf_dpo",
    "rlhf_ppo": "nemo_launcher.jobs.gpt.rlhf_ppo_actor",
    "rlhf_eval": "nemo_launcher.jobs.gpt.rlhf_eval",
}
# Programs a stage runs beside its own, by the names its stage class asks for: DPO's reference job and PPO's roles
# (contract/rlhf_roles.py names their kinds).
_GPT_ROLE_PROGRAMS = {
    "rlhf_dpo_reference": "nemo_launcher.jobs.gpt.rlhf_dpo_reference",
    "rlhf_ppo_reward_model": "nemo_launcher.jobs.gpt.rlhf_ppo_reward_model",
    "rlhf_ppo_initial_policy": "nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy",
    "rlhf_ppo_critic": "nemo_launcher.jobs.gpt.rlhf_ppo_critic",
    "rlhf_ppo_actor": "nemo_launcher.jobs.gpt.rlhf_ppo_actor",
}
_GPT_SCHEMAS = {
    "data_preparation": _DATA_PREPARATION_SCHEMA,
    "training": f"{_SCHEMAS}.gpt_training:TrainingConfig",
    "conversion": f"{_SCHEMAS}.gpt_conversion:ConversionConfig",
    "fine_tuning": f"{_SCHEMAS}.gpt_sft:SftConfig",
    "peft": f"{_SCHEMAS}.gpt_sft:SftConfig",
    "prompt_learning": f"{_SCHEMAS}.gpt_prompt_learning:PromptLearningConfig",
    "adapter_learning": f"{_SCHEMAS}.gpt_prompt_learning:PromptLearningConfig",
    "ia3_learning": f"{_SCHEMAS}.gpt_prompt_learning:PromptLearningConfig",
    "evaluation": f"{_SCHEMAS}.gpt_evaluation:EvaluationConfig",
    "export": f"{_SCHEMAS}.gpt_export:ExportConfig",
    "conversion_nemo2hf": f"{_SCHEMAS}.hf_export_stage:NemoToHFConfig",
    "rlhf_rm": f"{_SCHEMAS}.rlhf_rm:RewardModelConfig",
    "rlhf_dpo": f"{_SCHEMAS}.rlhf_dpo:DpoConfig",
    "rlhf_ppo": f"{_SCHEMAS}.rlhf_ppo:PpoConfig",
    "rlhf_eval": f"{_SCHEMAS}.rlhf_eval:RlhfEvalConfig",
}
_GPT_PREPARERS = {
    # SQuAD JSON -> prompt/answer jsonl (standard library only).
    "fine_tuning": "nemo_launcher.jobs.data.squad",
    "peft": "nemo_launcher.jobs.data.squad",
    "prompt_learning": "nemo_launcher.jobs.data.squad",
    "adapter_learning": "nemo_launcher.jobs.data.squad",
    "ia3_learning": "nemo_launcher.jobs.data.squad",
    # Smoke-test lm-eval task files made from local text, where the real task data cannot be fetched.
    "evaluation": "nemo_launcher.jobs.gpt.sample_eval_data",
}


def _gpt_architecture(name: str, description: str) -> Family:
    """A family that trains, tunes, evaluates and exports with GPT's programs; its .nemo is megatron_<name>.nemo."""
    return Family(
        name,
        description,
        programs=_GPT_PROGRAMS,
        schemas=_GPT_SCHEMAS,
        preparers=_GPT_PREPARERS,
        nemo_file_name=f"megatron_{name}.nemo",
        role_programs=_GPT_ROLE_PROGRAMS,
    )


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            name="gpt3",
            description="decoder-only GPT (megatron-core GPTModel)",
            programs=_GPT_PROGRAMS,
            schemas=_GPT_SCHEMAS,
            preparers=_GPT_PREPARERS,
            nemo_file_name="megatron_gpt.nemo",
            role_programs=_GPT_ROLE_PROGRAMS,
        ),
        _gpt_architecture(
            "llama", "Llama 2 and 3: GPT with RMSNorm, SwiGLU, rotary positions, grouped-query attention"
        ),
        _gpt_architecture("mistral", "Mistral: the Llama architecture with grouped-query attention"),
        _gpt_architecture("qwen2", "Qwen2: the Llama architecture with q/k/v biases"),
        _gpt_architecture("mixtral", "Mixtral: Mistral with mixture-of-experts MLPs (expert parallelism)"),
        _gpt_architecture("nemotron", "Nemotron 3 and 4: rotary GPT with layernorm1p and a squared-ReLU MLP"),
        Family(
            name="t5",
            description="encoder-decoder T5 (megatron-core T5Model), WordPiece vocabulary",
            programs=_T5_PROGRAMS,
            schemas=_T5_SCHEMAS,
            preparers=_T5_PREPARERS,
            nemo_file_name="megatron_t5.nemo",
        ),
        Family(
            name="mt5",
            description="multilingual T5: T5's programs and schemas, mC4 data, SentencePiece vocabulary",
            programs=_T5_PROGRAMS,
            schemas=_T5_SCHEMAS,
            preparers=_T5_PREPARERS,
            nemo_file_name="megatron_mt5.nemo",
        ),
        Family(
            name="bert",
            description="encoder-only BERT (megatron-core BertModel): masked LM and sentence order",
            programs={
                "data_preparation": _DATA_PREPARATION,
                "training": "nemo_launcher.jobs.bert.train",
                "conversion": "nemo_launcher.jobs.bert.convert",
            },
            schemas={
                "data_preparation": _DATA_PREPARATION_SCHEMA,
                "training": f"{_SCHEMAS}.bert_training:BertTrainingConfig",
                "conversion": f"{_SCHEMAS}.bert_conversion:BertConversionConfig",
            },
            nemo_file_name="megatron_bert.nemo",
        ),
        _hf_import("hf_llama2", "LlamaForCausalLM (Llama 2 and 3)"),
        _hf_import("hf_mistral_7b", "MistralForCausalLM"),
        _hf_import("hf_mixtral", "MixtralForCausalLM"),
        _hf_import("hf_qwen2", "Qwen2ForCausalLM"),
        _data_preparation_only("generic", "any model family's corpus: your own files and a SentencePiece tokenizer"),
        Family(
            name="rlhf",
            description="preference data for the RLHF stages: comparison pairs, PPO prompts, SFT files",
            programs={"data_preparation": _DATA_PREPARATION},
            schemas={"data_preparation": f"{_SCHEMAS}.preference_preparation:PreferencePreparation"},
        ),
        # The seed picks the evaluation program by these prefixes; prompt_gpt3 keeps the seed's own key layout.
        _tuned_evaluation("prompt", "gpt3", "nemo_launcher.jobs.gpt.evaluate_tuned", "PromptGptEvaluationConfig"),
        _tuned_evaluation("adapter", "gpt3", "nemo_launcher.jobs.gpt.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("ia3", "gpt3", "nemo_launcher.jobs.gpt.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("prompt", "llama", "nemo_launcher.jobs.gpt.evaluate_tuned", "PromptGptEvaluationConfig"),
        _tuned_evaluation("adapter", "llama", "nemo_launcher.jobs.gpt.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("ia3", "llama", "nemo_launcher.jobs.gpt.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("prompt", "t5", "nemo_launcher.jobs.t5.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("prompt", "mt5", "nemo_launcher.jobs.t5.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("adapter", "t5", "nemo_launcher.jobs.t5.evaluate_tuned", "TunedEvaluationConfig"),
        _tuned_evaluation("ia3", "t5", "nemo_launcher.jobs.t5.evaluate_tuned", "TunedEvaluationConfig"),
        Family(
            name="dit",
            description="diffusion transformer (adaLN-Zero DiT on megatron-core layers): latents in, noise out",
            # Data preparation runs nemo_launcher.jobs.dit.<step> (the generated Energon dataset of tiny configs).
            programs={
                "data_preparation": "nemo_launcher.jobs.dit",
                "training": "nemo_launcher.jobs.dit.train",
                "fw_inference": "nemo_launcher.jobs.dit.sample",
            },
            schemas={
                "data_preparation": f"{_SCHEMAS}.dit_data:DitShapesDataConfig",
                "training": f"{_SCHEMAS}.dit_training:DitTrainingConfig",
                "fw_inference": f"{_SCHEMAS}.dit_inference:DitSampleConfig",
            },
        ),
        Family(
            name="stable_diffusion",
            description=(
                "latent diffusion: diffusers' UNet and VAE, transformers' CLIP text encoder, on WebDataset shards"
            ),
            # Evaluation (fid_clip) runs nemo_launcher.jobs.fid_evaluation.<step>: generate -> fid -> clip -> plot.
            programs={
                "training": f"{_SD_JOBS}.train",
                "fw_inference": f"{_SD_JOBS}.text2img",
                "evaluation": "nemo_launcher.jobs.fid_evaluation",
                "export": f"{_SD_JOBS}.export",
            },
            schemas={
                "training": f"{_SCHEMAS}.stable_diffusion_training:StableDiffusionTrainingConfig",
                "fw_inference": f"{_SCHEMAS}.sd_inference:Text2ImgConfig",
                "evaluation": f"{_SCHEMAS}.sd_evaluation:FidClipConfig",
                "export": f"{_SCHEMAS}.sd_export:SdExportConfig",
            },
            training_nemo_file_name="nemo_stable_diffusion.nemo",
        ),
        _stable_diffusion_variant(
            "dreambooth",
            "Stable Diffusion fine-tuned to bind a token to one subject: SD's text2img on its .nemo",
            "DreamBooth",
            inference="text2img:Text2ImgConfig",
            export_schema="SdExportConfig",
        ),
        _stable_diffusion_variant(
            "instruct_pix2pix",
            "Stable Diffusion editing an input image by an instruction (8-channel UNet input)",
            "InstructPix2Pix",
            inference="edit_cli:EditConfig",
            export_schema="EditExportConfig",
        ),
        Family(
            name="fid_evaluation",
            description="COCO-2014 val images and captions for the Stable Diffusion FID/CLIP evaluation",
            # Data preparation runs nemo_launcher.jobs.fid_evaluation.<step>:
            # [generate_shapes] [standin_scorers] preprocess.
            programs={"data_preparation": "nemo_launcher.jobs.fid_evaluation"},
            schemas={"data_preparation": f"{_SCHEMAS}.fid_evaluation_data:FidEvaluationDataConfig"},
        ),
        Family(
            name="hf_model",
            description="a tiny Hugging Face model made here with random weights, for imports without a network",
            # Data preparation runs nemo_launcher.jobs.gpt.tiny_hf_model.
            programs={"data_preparation": "nemo_launcher.jobs.gpt"},
            schemas={"data_preparation": f"{_SCHEMAS}.hf_model_data:TinyHFModelConfig"},
        ),
        Family(
            name="multimodal",
            description="image-text pairs for the vision and diffusion families: parquet -> WebDataset tars",
            programs={"data_preparation": "nemo_launcher.jobs.multimodal"},
            schemas={"data_preparation": f"{_SCHEMAS}.multimodal_data:MultimodalDataConfig"},
        ),
        Family(
            name="vit",
            description="vision transformer classifier (megatron-core CLIPViTModel and a head) on class folders",
            # Data preparation runs nemo_launcher.jobs.vision.<step>: the generated class folders of tiny configs
            # (dataset shape_folders), or class folders packed into WebDataset shards (imagenet_shards).
            programs={
                "data_preparation": "nemo_launcher.jobs.vision",
                "training": "nemo_launcher.jobs.vit.train",
                "conversion": "nemo_launcher.jobs.vision.convert",
                "fine_tuning": "nemo_launcher.jobs.vit.finetune",
                "evaluation": "nemo_launcher.jobs.vit.evaluate",
                "fw_inference": "nemo_launcher.jobs.vit.classify",
                "export": "nemo_launcher.jobs.vit.export",
            },
            schemas={
                "data_preparation": f"{_SCHEMAS}.vit_data:VitDataPreparation",
                "training": f"{_SCHEMAS}.vit_training:VitTrainingConfig",
                "conversion": f"{_SCHEMAS}.vision_conversion:VitConversionConfig",
                "fine_tuning": f"{_SCHEMAS}.vit_finetuning:VitFinetuneConfig",
                "evaluation": f"{_SCHEMAS}.vision_evaluation:VitEvaluationConfig",
                "fw_inference": f"{_SCHEMAS}.vision_inference:VitClassifyConfig",
                "export": f"{_SCHEMAS}.vision_export:VitExportConfig",
            },
            training_nemo_file_name="nemo_vit_classification.nemo",
        ),
        Family(
            name="clip",
            description=(
                "CLIP: megatron-core vision and text towers, contrastive loss, on WebDataset image-caption tars"
            ),
            programs={
                "training": "nemo_launcher.jobs.clip.train",
                "fw_inference": "nemo_launcher.jobs.clip.similarity",
                "conversion": "nemo_launcher.jobs.vision.convert",
                "evaluation": "nemo_launcher.jobs.clip.zeroshot",
                "export": "nemo_launcher.jobs.clip.export",
            },
            schemas={
                "training": f"{_SCHEMAS}.clip_training:ClipTrainingConfig",
                "conversion": f"{_SCHEMAS}.vision_conversion:ClipConversionConfig",
                "evaluation": f"{_SCHEMAS}.vision_evaluation:ClipZeroshotConfig",
                "fw_inference": f"{_SCHEMAS}.vision_inference:ClipSimilarityConfig",
                "export": f"{_SCHEMAS}.vision_export:ClipExportConfig",
            },
            training_nemo_file_name="nemo_clip.nemo",
        ),
    )
}


def family_for(stage: str, choice: str) -> Family:
    """The family of a config choice such as `gpt3/5b` (the part before the last slash)."""
    name = choice.rsplit("/", 1)[0] if "/" in choice else ""
    if name not in FAMILIES:
        known = sorted(family for family, row in FAMILIES.items() if stage in row.programs) or sorted(FAMILIES)
        raise config_error(
            stage,
            choice,
            f"pick a config under a known model family ({', '.join(known)}), e.g. {stage}=gpt3/<name>",
        )
    return FAMILIES[name]


def program_for(family: Family, stage: str, choice: str) -> str:
    if stage in family.role_programs:
        return family.role_programs[stage]
    if stage not in family.programs:
        known = ", ".join(sorted(family.programs)) or "none"
        raise config_error(stage, choice, f"the {family.name} family has no {stage} program yet; it has: {known}")
    return family.programs[stage]


def schema_for(family: Family, stage: str) -> str:
    return family.schemas[stage]


def check_same_family(cfg, choices: dict[str, str | None], stages) -> None:
    """A stage that follows the training run (its run.model_train_name is training.run.name) must be of the
    training config's family: conversion=t5/convert_t5 after training=gpt3/tiny in one pipeline would feed a GPT
    checkpoint to the T5 converter after the queue wait.

    A training config that is not among the stages and is of another family than every selected stage (the
    default gpt3/5b under stages=[conversion] conversion=t5/convert_t5) is not followed at all: it is dropped, so
    each downstream config falls back to its own family's run (`${oc.select:training.run.name,t5_220m}`)."""
    from omegaconf import OmegaConf, open_dict

    training_choice = choices.get("training") or ""
    training_family = training_choice.rpartition("/")[0]
    training_name = OmegaConf.select(cfg, "training.run.name", default=None, throw_on_missing=False)
    if not training_family or training_name is None:
        return
    families = {stage: _stage_family(choices.get(stage) or "") for stage in stages if stage != "training"}
    families = {stage: family for stage, family in families.items() if family is not None}
    if "training" not in stages and families and training_family not in families.values():
        with open_dict(cfg):
            cfg.training = None
        return
    for stage, family in families.items():
        if family == training_family:
            continue
        follows = OmegaConf.select(cfg, f"{stage}.run.model_train_name", default=None, throw_on_missing=False)
        if follows == training_name:
            choice = choices.get(stage)
            raise config_error(
                stage,
                choice,
                f"this {family} config follows the training run {training_name!r} of training={training_choice} "
                f"({training_family}); pick a {family} training config (training={family}/<size>), or name the run "
                f"with {stage}.run.model_train_name=<run name>",
            )


def _stage_family(choice: str) -> str | None:
    """The family whose training runs a stage config follows (a tuning family's base), or None."""
    family = choice.rpartition("/")[0]
    if family not in FAMILIES:
        return None
    return FAMILIES[family].tunes or family
