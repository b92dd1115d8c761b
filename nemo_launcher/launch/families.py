"""Model families are data: one row per family names, for each stage kind, the job program it runs and the
schema (in `nemo_launcher.contract.schemas`) that both the launcher and that program bind its config to.

Adding a family adds a row here, its schemas, config files under conf/<stage>/<family>/ and a job package,
never branches elsewhere.
"""
from dataclasses import dataclass, field
from typing import Dict

from .errors import config_error

_SCHEMAS = "nemo_launcher.contract.schemas"


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    programs: Dict[str, str] = field(default_factory=dict)  # stage kind -> job program module
    schemas: Dict[str, str] = field(default_factory=dict)  # stage kind -> "module:Class" with from_dict(section, stage)


FAMILIES: Dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            name="gpt3",
            description="decoder-only GPT (megatron-core GPTModel)",
            programs={
                "training": "nemo_launcher.jobs.gpt.train",
                "conversion": "nemo_launcher.jobs.gpt.convert",
                "fine_tuning": "nemo_launcher.jobs.gpt.finetune",
                "peft": "nemo_launcher.jobs.gpt.peft",
                "evaluation": "nemo_launcher.jobs.gpt.evaluate",
                "export": "nemo_launcher.jobs.gpt.export",
            },
            schemas={
                "training": f"{_SCHEMAS}.gpt_training:TrainingConfig",
                "conversion": f"{_SCHEMAS}.gpt_conversion:ConversionConfig",
                "fine_tuning": f"{_SCHEMAS}.gpt_sft:SftConfig",
                "peft": f"{_SCHEMAS}.gpt_sft:SftConfig",
                "evaluation": f"{_SCHEMAS}.gpt_evaluation:EvaluationConfig",
                "export": f"{_SCHEMAS}.gpt_export:ExportConfig",
            },
        ),
    )
}


def family_for(stage: str, choice: str) -> Family:
    """The family of a config choice such as `gpt3/5b` (the part before the last slash)."""
    name = choice.rsplit("/", 1)[0] if "/" in choice else ""
    if name not in FAMILIES:
        raise config_error(
            stage, choice,
            f"pick a config under a known model family ({', '.join(sorted(FAMILIES))}), e.g. {stage}=gpt3/<name>",
        )
    return FAMILIES[name]


def program_for(family: Family, stage: str, choice: str) -> str:
    if stage not in family.programs:
        known = ", ".join(sorted(family.programs)) or "none"
        raise config_error(stage, choice, f"the {family.name} family has no {stage} program yet; it has: {known}")
    return family.programs[stage]


def schema_for(family: Family, stage: str) -> str:
    return family.schemas[stage]
