"""T5/mT5 evaluation: SQuAD's exact match and F1 on hand-made cases, the SQuAD JSON -> text files preparer, and the
evaluation program on a tiny fine-tuned T5 (predictions, results JSON, table)."""

import json
import subprocess
import sys

import pytest

from nemo_launcher.jobs.common.qa_metrics import (
    average_over_files,
    exact_match,
    exact_string_match,
    normalize_answer,
    squad_scores,
    token_f1,
)
from tests.conftest import require_module


# ---- the metric, checked against values worked out by hand from SQuAD v1.1's evaluation script ----------------------
@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The  Quick, brown-fox!", "quick brownfox"),  # lower case, punctuation dropped (hyphen too), article, spaces
        ("an apple a day", "apple day"),
        ("Theatre and THE anthem", "theatre and anthem"),  # articles only as whole words
        ("the-end", "theend"),  # punctuation goes before articles are looked for
        ("  ¿Qué?  ", "¿qué"),  # only ASCII punctuation is removed, as in the script
        ("...", ""),
    ],
)
def test_normalisation_follows_the_official_script(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_and_f1_of_single_answers():
    assert exact_match("the Denver Broncos", "Denver Broncos.")
    assert token_f1("the Denver Broncos", "Denver Broncos.") == 1.0
    # 1 shared word of 2 predicted and 2 expected: precision 1/2, recall 1/2.
    assert token_f1("Broncos won", "Denver Broncos") == pytest.approx(0.5)
    # Words count as a multiset: {x:1, y:2} & {x:1, y:1} share 2; precision 2/3, recall 1 -> F1 0.8.
    assert token_f1("x y y", "x y") == pytest.approx(0.8)
    assert token_f1("x", "x y z w") == pytest.approx(2 * 1 * 0.25 / 1.25)
    assert token_f1("", "anything") == 0.0
    # Both normalise to nothing: the script calls that an exact match, with F1 0 (no shared word).
    assert exact_match("...", "!") and token_f1("...", "!") == 0.0


def test_dataset_scores_take_the_best_answer_per_question_and_average_times_100():
    predictions = ["Broncos", "Santa Clara", "in 2016", "Carolina"]
    references = [
        ["Denver Broncos", "Broncos"],  # EM 1 (second answer), F1 1
        ["Levi's Stadium"],  # EM 0, F1 0
        ["2016", "February 7, 2016"],  # EM 0; F1 max(2/3, 2*(1/2)(1/3)/(5/6) = 0.4) = 2/3
        ["Carolina Panthers"],
    ]  # EM 0; F1 2*(1)(1/2)/(3/2) = 2/3
    scores = squad_scores(predictions, references)
    assert scores["examples"] == 4
    assert scores["exact_match"] == pytest.approx(25.0)
    assert scores["f1"] == pytest.approx(100.0 * (1 + 0 + 2 / 3 + 2 / 3) / 4)
    with pytest.raises(ValueError):
        squad_scores(["a"], [])


def test_exact_string_match_and_averages_over_files():
    assert exact_string_match([" yes", "No", "maybe "], ["yes", "no", "maybe"]) == pytest.approx(200 / 3)
    files = {"big": (3, 100.0), "small": (1, 0.0)}
    assert average_over_files(files, "micro") == pytest.approx(75.0)
    assert average_over_files(files, "macro") == average_over_files(files, None) == pytest.approx(50.0)


# ---- the preparer ----------------------------------------------------------------------------------------------------
def squad_document(records):
    """A SQuAD v1.1-format document: records are (context, question, [answers]) tuples, one paragraph each."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": str(i),
                                "question": question,
                                "answers": [{"text": a, "answer_start": 0} for a in answers],
                            }
                        ],
                    }
                    for i, (context, question, answers) in enumerate(records)
                ],
            }
        ],
    }


def test_preparer_writes_one_line_per_question_and_keeps_existing_files(tmp_path):
    from nemo_launcher.jobs.t5.squad_data import prepare

    source = tmp_path / "dev.json"
    records = [
        ("Paris is in\nFrance.", "Where is  Paris?", ["France", "in France"]),
        ("No answer here.", "What?", []),
        ("Water boils at 100 C.", "At what temperature\tdoes water boil?", ["100 C"]),
    ]
    source.write_text(json.dumps(squad_document(records)))
    entry = {
        "source": str(source),
        "src_file_name": str(tmp_path / "out" / "dev_src.txt"),
        "tgt_file_name": str(tmp_path / "out" / "dev_tgt.txt"),
        "answers_file_name": str(tmp_path / "out" / "dev_answers.jsonl"),
    }
    [(item, count, written)] = prepare({"squad_preparation": [entry]})
    assert (count, written) == (2, True)
    assert (tmp_path / "out" / "dev_src.txt").read_text().splitlines() == [
        "question: Where is Paris? context: Paris is in France.",
        "question: At what temperature does water boil? context: Water boils at 100 C.",
    ]
    assert (tmp_path / "out" / "dev_tgt.txt").read_text().splitlines() == ["France", "100 C"]
    answers = [json.loads(line) for line in (tmp_path / "out" / "dev_answers.jsonl").read_text().splitlines()]
    assert answers == [["France", "in France"], ["100 C"]]
    assert not list((tmp_path / "out").glob(".*")), "no temporary file is left"
    source.unlink()  # a second run keeps what is there and needs no source
    assert prepare({"squad_preparation": [entry]})[0][1:] == (2, False)


def test_preparer_refuses_a_missing_source_and_unknown_keys_in_one_line(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(
        f"squad_preparation:\n  - source: {tmp_path}/none.json\n    src_file_name: {tmp_path}/s.txt\n"
        f"    tgt_file_name: {tmp_path}/t.txt\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.t5.squad_data", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1 and "none.json" in result.stderr
    config.write_text(f"squad_preparation:\n  - source: {tmp_path}/none.json\n    src_file: {tmp_path}/s.txt\n")
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.t5.squad_data", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "squad_preparation[0].src_file" in result.stderr


# ---- the evaluation program ------------------------------------------------------------------------------------------
QUESTIONS = [
    ("the river is green .", "what colour is the river ?", ["green", "a green one"]),
    ("the door is red .", "what colour is the door ?", ["red"]),
    ("the ship is blue .", "what colour is the ship ?", ["blue", "blue ship"]),
]


def test_evaluation_writes_predictions_and_squad_scores_of_the_model(tmp_path):
    require_module("torch")
    from nemo_launcher.jobs.t5.standalone import load_t5_from_nemo
    from nemo_launcher.jobs.t5.text_pairs import PairEncoder, read_pairs
    from nemo_launcher.jobs.t5.tuning import answer_pairs
    from nemo_launcher.launch.stage_config import write_stage_config
    from tests.jobs.gpt_train_support import run_training
    from tests.jobs.t5_tuning_support import tiny_t5_nemo

    nemo = tiny_t5_nemo(tmp_path)
    data_dir = tmp_path / "data"
    dev = data_dir / "squad_data" / "v1.1" / "dev-v1.1.json"
    dev.parent.mkdir(parents=True)
    dev.write_text(json.dumps(squad_document(QUESTIONS)))
    config = write_stage_config(
        tmp_path / "eval.yaml",
        "evaluation",
        "t5/squad",
        data_dir=data_dir,
        base_results_dir=tmp_path / "results",
        overrides=[
            "run.model_train_name=t5_tiny",
            f"model.restore_from_path={nemo}",
            "model.eval_batch_size=2",
            "model.data.validation_ds.max_src_seq_length=32",
            "model.data.validation_ds.max_tgt_seq_length=4",
        ],
    )
    # What the launcher runs: the family's preparer, then the program.
    run_training(config, program=("nemo_launcher.jobs.t5.squad_data",))
    result = run_training(config, program=("nemo_launcher.jobs.t5.evaluate",))
    assert "warning" not in (result.stdout + result.stderr).lower()

    results_dir = tmp_path / "results" / "t5_tiny" / "squad_eval" / "results"
    scores = json.loads((results_dir / "qa_metrics.json").read_text())
    lines = [json.loads(line) for line in (results_dir / "squad_predictions.jsonl").read_text().splitlines()]
    assert [line["answers"] for line in lines] == [answers for _, _, answers in QUESTIONS]
    expected = squad_scores([line["prediction"] for line in lines], [line["answers"] for line in lines])
    assert scores == {
        "squad": {
            "exact_match": pytest.approx(expected["exact_match"]),
            "f1": pytest.approx(expected["f1"]),
            "examples": 3,
        }
    }
    assert "exact_match" in result.stdout and "squad" in result.stdout  # the table

    model, tokenizer = load_t5_from_nemo(nemo)
    pairs = read_pairs(
        *(
            str(data_dir / "squad_data" / "v1.1" / f"dev-v1.1_{part}")
            for part in ("src.txt", "tgt.txt", "answers.jsonl")
        )
    )
    assert [line["prediction"] for line in lines] == answer_pairs(model, pairs, PairEncoder(tokenizer, 32, 4), 2)
