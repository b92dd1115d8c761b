"""GPT's and BERT's model sections share DecoderStackSection: the same layout keys, bound and refused alike.

The pipeline rules (layers divisible by PP x virtual PP, virtual stages needing PP > 1, the interleaved schedule's
microbatch groups) are written once; these tests hold both families to the same one-line messages.
"""

import pytest
from omegaconf import OmegaConf

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.bert_training import BertTrainingConfig
from nemo_launcher.contract.schemas.common_training import DecoderStackSection, check_layout
from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
from nemo_launcher.contract.tokenizers import TOKENIZER_LIBRARIES, TokenizerLibrary

from ..launch.conftest import compose_config

FAMILIES = {"gpt": ("gpt3/5b", TrainingConfig), "bert": ("bert/110m", BertTrainingConfig)}


def _section(family: str, **model):
    """The family's resolved training section with `model` keys replaced (num_layers 24 in both)."""
    name, schema = FAMILIES[family]
    cfg, _ = compose_config(["stages=[training]", f"training={name}"])
    section = OmegaConf.to_container(cfg.training, resolve=True)
    section["model"].update(num_layers=24, **model)
    section["exp_manager"].get("checkpoint_callback_params", {}).pop("model_parallel_size", None)  # follows TP x PP
    return schema, section


def _refusal(family: str, **model) -> str:
    schema, section = _section(family, **model)
    with pytest.raises(JobConfigError) as caught:
        schema.from_dict(section)
    return str(caught.value)


@pytest.mark.parametrize(
    "model, expected",
    [
        (
            dict(pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=2),
            "training.model.virtual_pipeline_model_parallel_size=2: needs pipeline_model_parallel_size > 1",
        ),
        (
            dict(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=5),
            (
                "training.model.num_layers=24: must be divisible by PP(2) x virtual PP(5) = 10; "
                "change num_layers or the pipeline sizes"
            ),
        ),
        (
            dict(virtual_pipeline_model_parallel_size=0),
            "training.model.virtual_pipeline_model_parallel_size=0: must be a positive integer",
        ),
    ],
)
def test_the_pipeline_rules_refuse_gpt_and_bert_with_the_same_line(model, expected):
    messages = {family: _refusal(family, **model) for family in FAMILIES}
    assert messages == {"gpt": expected, "bert": expected}
    assert "\n" not in expected


def test_both_families_bind_the_shared_section_and_its_interleaved_batch_rule():
    for family in FAMILIES:
        schema, section = _section(
            family,
            pipeline_model_parallel_size=2,
            virtual_pipeline_model_parallel_size=3,
            tensor_model_parallel_size=1,
            micro_batch_size=1,
            global_batch_size=8,
        )
        section["trainer"].update(num_nodes=1, devices=4)  # DP = 4 / PP(2) = 2: 8 / (1 x 2) = 4 microbatches, 2 groups
        cfg = schema.from_dict(section)
        assert isinstance(cfg.model, DecoderStackSection)
        assert cfg.model.virtual_pipeline_size() == 3
        assert check_layout(cfg.model, 1, 4, "training") == 2
        schema, section = _section(
            family,
            pipeline_model_parallel_size=2,
            virtual_pipeline_model_parallel_size=3,
            tensor_model_parallel_size=1,
            micro_batch_size=1,
            global_batch_size=6,
        )
        section["trainer"].update(num_nodes=1, devices=4)  # 6 / 2 = 3 microbatches: not a multiple of PP(2)
        with pytest.raises(
            JobConfigError,
            match=r"^training\.model\.global_batch_size=6: with the interleaved schedule "
            r"the number of microbatches \(6 / 2 = 3\) must be a multiple of PP\(2\)$",
        ):
            schema.from_dict(section)


def test_one_list_of_tokenizer_libraries_types_the_schemas():
    import typing

    from nemo_launcher.contract.schemas.data_preparation import PileConfig
    from nemo_launcher.contract.schemas.gpt_training import TokenizerSection

    assert TOKENIZER_LIBRARIES == ("megatron", "sentencepiece", "huggingface")
    assert typing.get_type_hints(TokenizerSection)["library"] is TokenizerLibrary
    assert typing.get_type_hints(PileConfig)["tokenizer_library"] is TokenizerLibrary


def test_a_stage_schema_binds_under_the_stage_it_names_or_the_one_given():
    import dataclasses

    from nemo_launcher.contract.binding import StageSchema

    @dataclasses.dataclass(frozen=True)
    class Probe(StageSchema, stage="export"):
        size: int

    assert Probe.from_dict({"size": 3}) == Probe(size=3)
    with pytest.raises(JobConfigError, match=r"^export\.size='3': expected an integer$"):
        Probe.from_dict({"size": "3"})
    with pytest.raises(JobConfigError, match=r"^peft\.sise: unknown key; did you mean size\?"):
        Probe.from_dict({"sise": 3}, "peft")


def test_fine_tuning_schemas_check_the_layout_under_their_own_stage():
    from nemo_launcher.contract.schemas.t5_finetuning import T5FinetuneConfig
    from nemo_launcher.contract.schemas.vit_finetuning import VitFinetuneConfig

    assert T5FinetuneConfig.stage == VitFinetuneConfig.stage == "fine_tuning"
    cfg, _ = compose_config(["stages=[fine_tuning]", "fine_tuning=t5/squad", "training=t5/220m"])
    section = OmegaConf.to_container(cfg.fine_tuning, resolve=True)
    tuned = T5FinetuneConfig.from_dict(section)
    processes = tuned.trainer.num_nodes * tuned.trainer.devices
    with pytest.raises(JobConfigError, match=r"^fine_tuning\.trainer\.devices="):
        tuned.data_parallel_size(processes + 1)


def test_sft_and_evaluation_sections_share_their_answers():
    from nemo_launcher.contract.schemas.common_training import (
        StoredPrecision,
        TrainerClock,
        TrainerSection,
        check_model_copies,
    )
    from nemo_launcher.contract.schemas.common_tuning import SftTrainer
    from nemo_launcher.contract.schemas.gpt_evaluation import EvaluationModel
    from nemo_launcher.contract.schemas.t5_evaluation import QaEvaluationModel

    assert issubclass(SftTrainer, TrainerClock) and issubclass(TrainerSection, TrainerClock)
    assert issubclass(EvaluationModel, StoredPrecision) and issubclass(QaEvaluationModel, StoredPrecision)

    class Run:
        nodes, ntasks_per_node = 1, 3

    with pytest.raises(
        JobConfigError,
        match=r"^evaluation\.run\.ntasks_per_node=3: nodes\(1\) x ntasks_per_node\(3\) = 3 "
        r"processes cannot hold TP\(2\) ranks evenly; make it a multiple$",
    ):
        check_model_copies(Run, 2, "evaluation")
    assert check_model_copies(Run, 3, "evaluation") == 3
