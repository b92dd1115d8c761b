"""The pairs file, dataset and collate shared by the reward model and DPO (jobs/rlhf/pairs.py).

OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_pairs.py -q
"""

import json

import pytest
import torch

from nemo_launcher.contract import preference_data as pd
from nemo_launcher.jobs.common.config import JobConfigError
from nemo_launcher.jobs.rlhf.pairs import (
    Pair,
    PairsDataset,
    RepeatedPairs,
    check_vocabulary,
    collate_pairs,
    read_pairs,
    split_pairs,
)

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import PAIR_COUNTS, preference_dir  # noqa: F401  (fixture)


def _write(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def test_the_tiny_sets_pairs_read_and_collate_chosen_rows_then_rejected_rows(preference_dir):  # noqa: F811
    path = pd.pairs_file(str(preference_dir), "validation")
    check_vocabulary(path, 2048, "model.data.data_prefix.validation")
    pairs = read_pairs(path, 2048, 64, "model.encoder_seq_length")
    assert len(pairs) == PAIR_COUNTS["validation"] and all(pair.ref_chosen is None for pair in pairs)
    batch = collate_pairs([pairs[0], pairs[1]], pad_id=0)
    rows = [pairs[0].prompt + pairs[0].chosen, pairs[1].prompt + pairs[1].chosen]
    rows += [pairs[0].prompt + pairs[0].rejected, pairs[1].prompt + pairs[1].rejected]
    assert batch["lengths"].tolist() == [len(row) for row in rows]
    for index, row in enumerate(rows):
        assert batch["tokens"][index, : len(row)].tolist() == list(row)
        assert batch["tokens"][index, len(row) :].eq(0).all()
        start = len(pairs[index % 2].prompt)
        assert batch["prompt_lengths"][index] == start
        assert batch["response_mask"][index].tolist() == [float(start <= t < len(row)) for t in range(len(row))] + [
            0.0
        ] * (batch["tokens"].shape[1] - len(row))
    assert batch["position_ids"][3].tolist() == list(range(batch["tokens"].shape[1]))
    assert "ref_logps" not in batch
    chosen, rejected = split_pairs(batch["lengths"])
    assert chosen.tolist() == [len(rows[0]), len(rows[1])] and rejected.tolist() == [len(rows[2]), len(rows[3])]


def test_reference_log_probs_travel_in_the_batch_in_row_order(tmp_path):
    path = _write(
        tmp_path / "ref.jsonl",
        [
            {"prompt": [1, 2], "chosen": [3, 0], "rejected": [4, 4, 0], "ref_chosen": -1.5, "ref_rejected": -2},
            {"prompt": [5], "chosen": [6, 0], "rejected": [7, 0], "ref_chosen": -0.5, "ref_rejected": -3.25},
        ],
    )
    pairs = read_pairs(path, 10, 8, "model.encoder_seq_length")
    batch = collate_pairs(PairsDataset(pairs).pairs, pad_id=9)
    assert batch["ref_logps"].tolist() == [-1.5, -0.5, -2.0, -3.25]
    assert batch["tokens"].tolist() == [[1, 2, 3, 0, 9], [5, 6, 0, 9, 9], [1, 2, 4, 4, 0], [5, 7, 0, 9, 9]]


def test_repeated_pairs_are_whole_seeded_passes():
    pairs = [Pair((i,), (1,), (2,)) for i in range(5)]
    drawn = RepeatedPairs(pairs, 12, seed=3)
    firsts = [drawn[i].prompt[0] for i in range(12)]
    assert sorted(firsts[:5]) == list(range(5)) and sorted(firsts[5:10]) == list(range(5))
    assert firsts == [RepeatedPairs(pairs, 12, seed=3)[i].prompt[0] for i in range(12)]
    assert firsts != [RepeatedPairs(pairs, 12, seed=4)[i].prompt[0] for i in range(12)]


@pytest.mark.parametrize(
    "line, message",
    [
        ({"prompt": [1], "chosen": [2]}, "'rejected' must be a list of token ids"),
        ({"prompt": [1], "chosen": [2], "rejected": [12]}, "outside the model's vocabulary of 10"),
        ({"prompt": [1], "chosen": [], "rejected": [2]}, "'chosen' is empty"),
        ({"prompt": [1] * 6, "chosen": [2], "rejected": [2, 3]}, "take 8 tokens, more than model.enc=7"),
        ({"prompt": [1], "chosen": [2], "rejected": [3], "ref_chosen": 1.0}, "must both be numbers"),
    ],
)
def test_a_bad_line_is_refused_naming_the_file_and_line(tmp_path, line, message):
    path = _write(tmp_path / "bad.jsonl", [{"prompt": [1], "chosen": [2], "rejected": [3]}, line])
    with pytest.raises(JobConfigError, match=f"bad.jsonl:2: .*{message}"):
        read_pairs(path, 10, 7, "model.enc")


def test_a_file_with_reference_fields_on_some_lines_only_is_refused(tmp_path):
    path = _write(
        tmp_path / "mixed.jsonl",
        [
            {"prompt": [1], "chosen": [2], "rejected": [3]},
            {"prompt": [1], "chosen": [2], "rejected": [3]}
            | {
                "ref_chosen": -1.0,
                "ref_rejected": -2.0,
            },
        ],
    )
    with pytest.raises(JobConfigError, match="1 of 2 pairs carry"):
        read_pairs(path, 10, 7, "model.enc")


def test_data_of_another_vocabulary_is_refused(preference_dir):  # noqa: F811
    path = pd.pairs_file(str(preference_dir), "train")
    with pytest.raises(JobConfigError, match="model.data.data_prefix.train=.*vocabulary of 2048 ids.*has 50257"):
        check_vocabulary(path, 50257, "model.data.data_prefix.train")


def test_split_pairs_wants_an_even_batch():
    with pytest.raises(ValueError, match="even number of rows"):
        split_pairs(torch.zeros(3))
