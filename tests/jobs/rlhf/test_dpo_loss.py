"""The DPO loss, its figures and the pair micro-batches (jobs/rlhf/dpo.py), against values worked out by hand; the
schema's refusals (contract/schemas/rlhf_dpo.py); the trainer's refusal of a reference copy without its fields.

OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_dpo_loss.py -q
"""

import copy
import json
import math
import shutil

import pytest
import torch

from nemo_launcher.contract import preference_data as pd
from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.rlhf_dpo import DpoConfig
from nemo_launcher.jobs.rlhf.dpo import DpoSettings, dpo_loss, token_nll
from nemo_launcher.jobs.rlhf.pairs import Pair, collate_pairs, split_pair_microbatches

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir  # noqa: F401  (fixture)
from .dpo_support import dpo_section


def _settings(**changes) -> DpoSettings:
    values = dict(
        beta=0.5,
        preference_loss_weight=1.0,
        sft_loss_weight=0.0,
        preference_average_log_probs=False,
        sft_average_log_probs=True,
    )
    values.update(changes)
    return DpoSettings(**values)


# Two pairs: rows 0, 1 chosen, rows 2, 3 rejected; per-token NLL of 3 positions, the last two counted (the response).
NLL = torch.tensor([[9.0, 0.5, 1.0], [9.0, 2.0, 2.0], [9.0, 1.5, 1.5], [9.0, 0.25, 0.75]])
MASK = torch.tensor([[0.0, 1.0, 1.0]] * 4)
REFERENCE = torch.tensor([-2.0, -3.0, -2.5, -1.5])  # chosen of pair 0, 1, then rejected of pair 0, 1
# policy sums: chosen -1.5, -4.0; rejected -3.0, -1.0


def test_loss_and_figures_match_the_hand_worked_values():
    loss, figures = dpo_loss(_settings(), MASK, REFERENCE, NLL)
    # pair 0: 0.5 x ((-1.5 + 2) - (-3 + 2.5)) = 0.5; pair 1: 0.5 x ((-4 + 3) - (-1 + 1.5)) = -0.75
    margins = [0.5, -0.75]
    expected = sum(-math.log(1 / (1 + math.exp(-m))) for m in margins) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert figures["dpo loss"].item() == pytest.approx(expected, abs=1e-6)
    assert figures["preference accuracy"].item() == 0.5
    assert figures["reward margin"].item() == pytest.approx(-0.125)
    assert figures["chosen reward"].item() == pytest.approx((0.25 - 0.5) / 2)
    assert figures["rejected reward"].item() == pytest.approx((-0.25 + 0.25) / 2)
    assert figures["sft loss"].item() == pytest.approx((0.75 + 2.0) / 2)  # chosen NLL per token


def test_sft_term_and_averaged_log_probs():
    loss, figures = dpo_loss(_settings(sft_loss_weight=0.5, preference_loss_weight=2.0), MASK, REFERENCE, NLL)
    assert loss.item() == pytest.approx(2 * figures["preference loss"].item() + 0.5 * 1.375, abs=1e-6)
    _, summed = dpo_loss(_settings(sft_average_log_probs=False), MASK, REFERENCE, NLL)
    assert summed["sft loss"].item() == pytest.approx((1.5 + 4.0) / 2)
    _, averaged = dpo_loss(_settings(preference_average_log_probs=True), MASK, REFERENCE, NLL)
    # per-token means: two response tokens each, so every log-ratio halves
    assert averaged["reward margin"].item() == pytest.approx(-0.125 / 2)


def test_a_policy_equal_to_its_reference_loses_ln_2():
    policy_sums = -(NLL * MASK).sum(-1)
    loss, figures = dpo_loss(_settings(beta=0.1), MASK, policy_sums, NLL)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-7)
    assert figures["reward margin"].item() == 0.0


def test_micro_batches_never_part_a_pair():
    pairs = [Pair((1,), (10 + i, 0), (20 + i, 0), -1.0 * i, -2.0 * i) for i in range(4)]
    batch = collate_pairs(pairs, pad_id=0)
    cut = split_pair_microbatches(batch, 2)
    assert len(cut) == 2
    for index, micro in enumerate(cut):
        first = 2 * index
        assert micro["tokens"][:, 1].tolist() == [10 + first, 11 + first, 20 + first, 21 + first]
        assert micro["ref_logps"].tolist() == [-first, -first - 1.0, -2.0 * first, -2.0 * first - 2.0]


def test_token_nll_scores_each_response_token_from_the_position_before_it():
    pairs = [Pair((1, 2), (3, 0), (4, 5, 0))]
    batch = collate_pairs(pairs, pad_id=0)
    seen = {}

    def model(tokens, positions, mask, labels):
        seen["labels"] = labels
        return torch.zeros(tokens.shape)

    _, mask = token_nll(model, batch)
    # chosen row 1 2 3 0 + padding: labels 2 3 0 ..; the response's tokens 3, 0 are the labels at positions 1 and 2
    assert seen["labels"][0].tolist() == [2, 3, 0, 0, 0] and mask[0].tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]
    assert seen["labels"][1].tolist() == [2, 4, 5, 0, 0] and mask[1].tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]


SECTION = dpo_section("/models/sft.nemo", "/data/rlhf/tiny", "/results/dpo", "/results/dpo/reference")


@pytest.mark.parametrize(
    "change, key",
    [
        ({"dpo": {"ref_policy_kl_penalty": 0.0}}, "rlhf_dpo.model.dpo.ref_policy_kl_penalty=0.0"),
        ({"dpo": {"ref_policy_kl_penalty": -0.1}}, "rlhf_dpo.model.dpo.ref_policy_kl_penalty=-0.1"),
        ({"dpo": {"preference_loss_weight": 0.0}}, "rlhf_dpo.model.dpo.preference_loss_weight=0.0"),
        ({"dpo": {"sft_loss_weight": -1.0}}, "rlhf_dpo.model.dpo.sft_loss_weight=-1.0"),
        ({"pipeline_model_parallel_size": 2}, "rlhf_dpo.model.pipeline_model_parallel_size=2"),
        ({"micro_batch_size": 3}, "rlhf_dpo.model.global_batch_size=16"),
        ({"data": {"data_dir": "/d", "max_seq_length": 1}}, "rlhf_dpo.model.data.max_seq_length=1"),
        ({"reference": {"output_dir": "/r", "micro_batch_size": 0}}, "rlhf_dpo.model.reference.micro_batch_size=0"),
        (
            {
                "reference": {"output_dir": "/r", "model_path": "/models/other.nemo"},
                "peft": {"peft_scheme": "lora", "lora_tuning": {}},
            },
            "rlhf_dpo.model.reference.model_path='/models/other.nemo'",
        ),
        (
            {"peft": {"peft_scheme": "lora", "merge": False, "lora_tuning": {}}},
            "rlhf_dpo.model.peft.merge=False",
        ),
    ],
)
def test_schema_refuses_in_one_line_naming_the_key(change, key):
    section = copy.deepcopy(SECTION)
    for name, value in change.items():
        if isinstance(value, dict) and isinstance(section["model"].get(name), dict):
            section["model"][name].update(value)
        else:
            section["model"][name] = value
    with pytest.raises(JobConfigError) as error:
        DpoConfig.from_dict(section, "rlhf_dpo")
    assert str(error.value).startswith(key) and "\n" not in str(error.value), str(error.value)


def test_schema_names_what_each_job_reads_and_writes():
    cfg = DpoConfig.from_dict(copy.deepcopy(SECTION), "rlhf_dpo")
    assert cfg.reference_writes() == ["/results/dpo/reference"]
    assert ("rlhf_dpo.model.restore_from_path", "/models/sft.nemo") in cfg.reference_reads()
    assert ("rlhf_dpo.model.data.data_dir", "/data/rlhf/tiny/train_pairs.jsonl") in cfg.reference_reads()
    reads = cfg.reads()
    assert ("rlhf_dpo.model.reference.output_dir", "/results/dpo/reference/train_pairs.jsonl") in reads
    assert ("rlhf_dpo.model.reference.output_dir", "/results/dpo/reference/validation_pairs.jsonl") in reads
    assert cfg.writes() == ["/results/dpo"] and cfg.policy_path() == "/results/dpo/checkpoints/megatron_gpt_dpo.nemo"
    other = copy.deepcopy(SECTION)
    other["model"]["reference"]["model_path"] = "/models/ref.nemo"
    assert DpoConfig.from_dict(other, "rlhf_dpo").reference_reads()[0] == (
        "rlhf_dpo.model.reference.model_path",
        "/models/ref.nemo",
    )


def test_trainer_refuses_a_reference_copy_without_its_fields(preference_dir, tmp_path):  # noqa: F811
    """A copy the reference job's record vouches for, but whose lines lack ref_chosen/ref_rejected (written by
    hand, or by another tool): the trainer names the file and the job to run."""
    from nemo_launcher.jobs.rlhf.dpo_reference import MANIFEST
    from nemo_launcher.jobs.rlhf.dpo_training import PreferencePairs

    model = tmp_path / "sft.nemo"
    model.write_bytes(b"stand-in")  # only its path, size and time are recorded
    section = dpo_section(str(model), preference_dir, tmp_path / "run", tmp_path / "reference")
    data = PreferencePairs(DpoConfig.from_dict(section, "rlhf_dpo"))
    (tmp_path / "reference").mkdir()
    source = pd.pairs_file(str(preference_dir), "train")
    shutil.copy(source, pd.pairs_file(str(tmp_path / "reference"), "train"))
    manifest = {"train": {"made_from": data.files.record(source), "pairs": 256}}
    (tmp_path / "reference" / MANIFEST).write_text(json.dumps(manifest))
    data.vocab_size = 2048
    with pytest.raises(
        JobConfigError, match=r"train_pairs.jsonl: no ref_chosen and ref_rejected: .*rlhf_dpo_reference"
    ):
        data.records("train")
    with pytest.raises(JobConfigError, match=r"rlhf_dpo.model.reference.output_dir: no .*validation_pairs.jsonl; run"):
        data.records("validation")
