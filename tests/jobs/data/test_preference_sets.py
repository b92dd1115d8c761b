"""The preference-set programs on the shipped configs (data_preparation=rlhf/tiny_preferences, convert_comparisons):
every file the RLHF stages, the fine_tuning stage and the tiny pre-training read, metadata.json, the schema's
refusals, and a bad line's one-line error with exit 2."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nemo_launcher.contract import preference_data as pd
from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.preference_preparation import PreferencePreparation, corpus_prefix, sft_file
from nemo_launcher.jobs.common.tokenizer import load_tokenizer
from nemo_launcher.jobs.data import preference_comparisons, preference_tiny

from ..data_support import REPO, tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir  # noqa: F401  (fixture)

CONF = REPO / "conf"
DIALOGUE = "\n\nHuman: Is this licence free?\n\nAssistant:"


def resolved(choice: str, tmp_path: Path, *overrides: str) -> Path:
    """The data_preparation section as the launcher writes it: composed by Hydra, every ${...} resolved."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                f"data_preparation={choice}",
                f"launcher_scripts_path={REPO}",
                f"data_dir={tmp_path}/data",
                f"base_results_dir={tmp_path}/results",
                *[f"data_preparation.{override}" for override in overrides],
            ],
        )
    values = OmegaConf.to_container(cfg.data_preparation, resolve=True)
    path = tmp_path / f"{values['run']['name']}_hydra.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _tiny_tokenizer():
    folder = REPO / "corpora" / "tiny_bpe"
    return load_tokenizer("megatron", "GPT2BPETokenizer", None, str(folder / "vocab.json"), str(folder / "merges.txt"))


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny_set")
    config = resolved("rlhf/tiny_preferences", tmp)
    started = time.monotonic()
    preference_tiny.main(["--config", str(config)])
    seconds = time.monotonic() - started
    return tmp / "data" / "rlhf" / "tiny_preferences", seconds


def test_the_tiny_set_writes_every_file_in_a_few_seconds(tiny_set):
    directory, seconds = tiny_set
    assert seconds < 10, seconds
    metadata = json.loads((directory / pd.METADATA_FILE).read_text())
    vocab, merges = REPO / "corpora" / "tiny_bpe" / "vocab.json", REPO / "corpora" / "tiny_bpe" / "merges.txt"
    assert metadata["tokenizer"] == {
        "library": "megatron",
        "type": "GPT2BPETokenizer",
        "model": None,
        "vocab_file": str(vocab),
        "merge_file": str(merges),
        "vocab_size": 2048,
        "eod": 2047,
    }
    assert metadata["pairs"] == {"train": 256, "validation": 64, "test": 64}
    assert metadata["prompts"] == {"train": 64, "validation": 16}
    assert metadata["sft"] == {"train": 512, "validation": 128, "test": 128}  # sft_responses: all
    assert (metadata["rule"], metadata["chance"]) == (pd.RULE, 0.5)
    for split, count in metadata["pairs"].items():
        assert len(_lines(pd.pairs_file(str(directory), split))) == count
    for split, count in metadata["prompts"].items():
        assert len(_lines(pd.prompts_file(str(directory), split))) == count
    assert not Path(pd.prompts_file(str(directory), "test")).exists()


def test_the_tiny_pairs_follow_the_rule_and_end_with_eod(tiny_set):
    directory, _ = tiny_set
    tokenizer = _tiny_tokenizer()
    expected = pd.tiny_comparisons(64, seed=2)  # validation: seed + 1
    records = _lines(pd.pairs_file(str(directory), "validation"))
    for record, comparison in zip(records, expected, strict=True):
        assert tokenizer.decode(record["prompt"]) == comparison.prompt
        assert record["chosen"][-1] == record["rejected"][-1] == tokenizer.eod
        chosen, rejected = (tokenizer.decode(record[key][:-1]) for key in ("chosen", "rejected"))
        assert (chosen, rejected) == comparison.responses
        assert pd.agreeable_share(chosen) > pd.agreeable_share(rejected)


def test_the_tiny_sft_files_are_what_fine_tuning_reads(tiny_set):
    directory, _ = tiny_set
    lines = _lines(sft_file(str(directory), "train"))
    comparisons = pd.tiny_comparisons(256, seed=1)
    assert lines[:2] == [{"input": comparisons[0].prompt, "output": text.strip()} for text in comparisons[0].responses]
    assert all(set(line) == {"input", "output"} and line["output"] and line["output"][0] != " " for line in lines)


def test_the_tiny_corpus_is_a_megatron_dataset_of_prompt_and_response_documents(tiny_set):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    directory, _ = tiny_set
    tokenizer = _tiny_tokenizer()
    prefix = corpus_prefix(str(directory))
    assert prefix == f"{directory}/corpus/preferences_text_document"
    dataset = IndexedDataset(prefix)
    comparisons = pd.tiny_comparisons(1024, seed=101)  # corpus: seed + 100
    assert len(dataset) == len(dataset.document_indices) - 1 == 2 * 1024
    for index in (0, 1, 2047):
        comparison = comparisons[index // 2]
        text = comparison.prompt + comparison.responses[index % 2]
        assert dataset[index].tolist() == tokenizer.encode(text) + [tokenizer.eod]
    metadata = json.loads((directory / pd.METADATA_FILE).read_text())
    assert metadata["corpus"] == {"prefix": prefix, "documents": 2048, "tokens": int(dataset.sequence_lengths.sum())}


def test_ranked_tiny_lists_expand_into_every_pair_and_a_rerun_leaves_no_file_of_the_last(tmp_path):
    earlier = resolved("rlhf/tiny_preferences", tmp_path, "comparisons.train=4", "comparisons.validation=4")
    preference_tiny.main(["--config", str(earlier)])
    config = resolved(
        "rlhf/tiny_preferences",
        tmp_path,
        "responses_per_prompt=3",
        "comparisons.train=10",
        "comparisons.validation=0",
        "comparisons.test=0",
        "prompts.validation=0",
        "corpus_comparisons=0",
        "sft_responses=chosen",
    )
    preference_tiny.main(["--config", str(config)])
    directory = tmp_path / "data" / "rlhf" / "tiny_preferences"
    metadata = json.loads((directory / pd.METADATA_FILE).read_text())
    assert (metadata["comparisons"], metadata["pairs"], metadata["sft"]) == (
        {"train": 10},
        {"train": 30},
        {"train": 10},
    )
    records = _lines(pd.pairs_file(str(directory), "train"))
    first = records[:3]  # one prompt's three responses: (1, 2), (1, 3), (2, 3)
    assert first[0]["chosen"] == first[1]["chosen"] and first[0]["rejected"] == first[2]["chosen"]
    assert first[1]["rejected"] == first[2]["rejected"]
    assert sorted(p.name for p in directory.iterdir()) == [
        "metadata.json",
        "train_pairs.jsonl",
        "train_prompts.jsonl",
        "train_sft.jsonl",
    ]


def _comparison_files(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    train = [
        {"prompt": "Q1. Answer:", "chosen": " agree", "rejected": " cannot"},
        {"prompt": "Q1. Answer:", "responses": [" free", " valid", " without"]},
        {"text": "Q2. Answer: agree free"},
        {"text": "Q2. Answer: cannot claims"},
        {"chosen": DIALOGUE + " Yes, it is.", "rejected": DIALOGUE + " No."},
    ]
    test = [{"chosen": DIALOGUE + " It is free.", "rejected": DIALOGUE + " I will not say."}]
    paths = folder / "train.jsonl", folder / "test.jsonl"
    for path, lines in zip(paths, (train, test)):
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return paths


def test_comparison_files_convert_with_deduplicated_prompts_and_chosen_sft(tmp_path):
    _comparison_files(tmp_path / "data" / "rlhf" / "hh_rlhf")
    config = resolved(
        "rlhf/convert_comparisons",
        tmp_path,
        f"tokenizer.vocab_file={REPO}/corpora/tiny_bpe/vocab.json",
        f"tokenizer.merge_file={REPO}/corpora/tiny_bpe/merges.txt",
    )
    preference_comparisons.main(["--config", str(config)])
    directory = tmp_path / "data" / "rlhf" / "convert_comparisons"
    metadata = json.loads((directory / pd.METADATA_FILE).read_text())
    assert metadata["comparisons"] == {"train": 4, "validation": 1}
    assert metadata["pairs"] == {"train": 6, "validation": 1}  # 1 + 3 (ranked) + 1 (text pair) + 1 (HH)
    assert metadata["prompts"] == {"train": 3, "validation": 1}  # Q1 twice, once written
    assert metadata["sources"] == {
        "train": [str(tmp_path / "data/rlhf/hh_rlhf/train.jsonl")],
        "validation": [str(tmp_path / "data/rlhf/hh_rlhf/test.jsonl")],
    }
    assert metadata["tokenizer"]["vocab_size"] == 2048 and metadata["skipped_lines"] == {"train": 0, "validation": 0}
    prompts = [line["text"] for line in _lines(pd.prompts_file(str(directory), "train"))]
    assert prompts[0] == "Q1. Answer:" and prompts[2] == DIALOGUE and prompts[1].startswith("Q2. Answer:")
    assert _lines(sft_file(str(directory), "validation")) == [{"input": DIALOGUE, "output": "It is free."}]
    assert len(_lines(sft_file(str(directory), "train"))) == 4  # one per comparison: its best response
    assert not Path(pd.pairs_file(str(directory), "test")).exists()


def test_long_pairs_are_left_out_and_bad_lines_skipped_are_counted(tmp_path):
    train, _ = _comparison_files(tmp_path / "in")
    with open(train, "a") as handle:
        handle.write("{broken\n")
    config = resolved(
        "rlhf/convert_comparisons",
        tmp_path,
        f"inputs.train=[{train}]",
        "inputs.validation=[]",
        "on_malformed=skip",
        "max_seq_length=10",
        f"tokenizer.vocab_file={REPO}/corpora/tiny_bpe/vocab.json",
        f"tokenizer.merge_file={REPO}/corpora/tiny_bpe/merges.txt",
    )
    metadata = preference_comparisons.convert(PreferencePreparation.from_dict(yaml.safe_load(config.read_text())))
    assert metadata["skipped_lines"] == {"train": 1}
    # "Q1. Answer:" is 8 tokens and its one-word answers 1 + eod: its 4 pairs fit in 10; the text pair (11) and the
    # HH dialogue (29) do not.
    assert (metadata["pairs"], metadata["too_long"]) == ({"train": 4}, {"train": 2})
    directory = str(tmp_path / "data" / "rlhf" / "convert_comparisons")
    assert DIALOGUE not in [line["text"] for line in _lines(pd.prompts_file(directory, "train"))]


def test_a_bad_line_stops_the_step_with_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = [{"prompt": "Q. Answer:", "chosen": " a", "rejected": " b"}, {"text": "same"}, {"text": "same"}]
    bad.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = resolved(
        "rlhf/convert_comparisons",
        tmp_path,
        f"inputs.train=[{bad}]",
        "inputs.validation=[]",
        f"tokenizer.vocab_file={REPO}/corpora/tiny_bpe/vocab.json",
        f"tokenizer.merge_file={REPO}/corpora/tiny_bpe/merges.txt",
    )
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.data.preference_comparisons", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: {bad}:2-3: the good and the bad text are identical "
        "(data_preparation.on_malformed=skip leaves such lines out and counts them)"
    )
    assert not (tmp_path / "data" / "rlhf" / "convert_comparisons" / pd.METADATA_FILE).exists()


def _tiny_section(tmp_path, **changes) -> dict:
    section = yaml.safe_load(resolved("rlhf/tiny_preferences", tmp_path).read_text())
    for dotted, value in changes.items():
        node = section
        *parents, last = dotted.split("__")
        for parent in parents:
            node = node[parent]
        node[last] = value
    return section


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"responses_per_prompt": 4, "words_per_response": 5},
            "data_preparation.words_per_response=5: 4 ranked responses differ by two agreeable words each",
        ),
        ({"responses_per_prompt": 1}, "data_preparation.responses_per_prompt=1: a comparison needs at least 2"),
        ({"output_dir": "rlhf/tiny"}, "data_preparation.output_dir='rlhf/tiny': must be an absolute path"),
        ({"comparisons__train": 0}, "data_preparation.comparisons.train=0: must be a positive integer"),
        ({"prompts__test": -1}, "data_preparation.prompts.test=-1: must be >= 0"),
        ({"tokenizer__merge_file": None}, "data_preparation.tokenizer.merge_file=None: library megatron with type"),
        ({"tokenizer__type": "GPT2BPE"}, "data_preparation.tokenizer.type='GPT2BPE': the megatron library builds"),
        ({"sft_responses": "best"}, "data_preparation.sft_responses='best': choose one of chosen, all"),
        (
            {"dataset": "preferences"},
            "data_preparation.dataset='preferences': choose one of tiny_preferences, comparisons",
        ),
    ],
)
def test_the_schema_refuses_with_the_key_the_value_and_the_fix(changes, message, tmp_path):
    with pytest.raises(JobConfigError) as caught:
        PreferencePreparation.from_dict(_tiny_section(tmp_path, **changes))
    assert message in str(caught.value)


def test_the_comparisons_schema_reads_its_inputs_and_tokenizer(tmp_path):
    section = yaml.safe_load(resolved("rlhf/convert_comparisons", tmp_path).read_text())
    cfg = PreferencePreparation.from_dict(section)
    data = f"{tmp_path}/data"
    assert cfg.reads() == [
        ("data_preparation.inputs.train", f"{data}/rlhf/hh_rlhf/train.jsonl"),
        ("data_preparation.inputs.validation", f"{data}/rlhf/hh_rlhf/test.jsonl"),
        ("data_preparation.tokenizer.vocab_file", f"{data}/bpe/vocab.json"),
        ("data_preparation.tokenizer.merge_file", f"{data}/bpe/merges.txt"),
    ]
    assert cfg.writes() == [f"{data}/rlhf/convert_comparisons"]
    assert [step.name for step in cfg.steps()] == ["preference_comparisons"]
    section["inputs"]["validation"] = ["test.jsonl"]
    with pytest.raises(JobConfigError, match=r"data_preparation.inputs.validation\[0\]='test.jsonl': must be an abs"):
        PreferencePreparation.from_dict(section)


def test_the_rlhf_tests_fixture_is_what_the_shipped_tiny_config_writes(tiny_set, preference_dir):  # noqa: F811
    """tests/jobs/rlhf_support.py's preference_dir (the reward model, DPO and PPO tests' data) is this program's
    output with the shipped config's counts and seeds: what those tests learn is what the quick start will."""
    directory, _ = tiny_set
    for split in pd.SPLITS:
        for name in (pd.pairs_file, pd.prompts_file, sft_file):
            shipped, fixture = Path(name(str(directory), split)), Path(name(str(preference_dir), split))
            assert shipped.exists() == fixture.exists(), shipped
            assert not shipped.exists() or shipped.read_bytes() == fixture.read_bytes(), shipped
    shipped, fixture = (json.loads((d / pd.METADATA_FILE).read_text()) for d in (directory, Path(preference_dir)))
    assert {key: shipped[key] for key in ("pairs", "prompts", "sft", "rule")} == {
        key: fixture[key] for key in ("pairs", "prompts", "sft", "rule")
    }
    assert shipped["tokenizer"]["vocab_size"] == fixture["tokenizer"]["vocab_size"] == 2048
