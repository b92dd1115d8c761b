"""Stage kinds by config group name. Adding one is a new module with a Stage subclass and a row here."""

import importlib

# stage kind (config group) -> (module, class); imported on use, so a run pays only for the stages it lists.
STAGES = {
    "data_preparation": ("data_preparation", "DataPreparationStage"),
    "training": ("training", "TrainingStage"),
    "conversion": ("conversion", "ConversionStage"),
    "conversion_hf2nemo": ("conversion_hf2nemo", "ConversionHF2NemoStage"),
    "conversion_nemo2hf": ("conversion_nemo2hf", "ConversionNemo2HFStage"),
    "fine_tuning": ("fine_tuning", "FineTuningStage"),
    "peft": ("peft", "PeftStage"),
    "prompt_learning": ("peft", "PromptLearningStage"),
    "adapter_learning": ("peft", "AdapterLearningStage"),
    "ia3_learning": ("peft", "Ia3LearningStage"),
    "evaluation": ("evaluation", "EvaluationStage"),
    "export": ("export", "ExportStage"),
    "fw_inference": ("fw_inference", "FwInferenceStage"),
    "rlhf_rm": ("rlhf", "RewardModelStage"),
    "rlhf_ppo": ("rlhf", "PpoStage"),
    "rlhf_dpo": ("rlhf", "DpoStage"),
    "rlhf_eval": ("rlhf", "RlhfEvalStage"),
}


def stage_class(kind: str):
    module, name = STAGES[kind]
    stage = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    assert stage.kind == kind, (stage, kind)
    return stage


__all__ = ["STAGES", "stage_class"]
