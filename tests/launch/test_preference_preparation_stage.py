"""data_preparation=rlhf/<name>: the preference sets of the RLHF stages through the launcher (dry runs, a real
interactive run, a missing input refused before anything is written)."""

import json
import subprocess
import time
from pathlib import Path

from nemo_launcher.contract import preference_data as pd
from nemo_launcher.contract.schemas.preference_preparation import corpus_prefix, sft_file
from nemo_launcher.launch.resolvers import REPO_ROOT

from .conftest import plan_rows


def _scripts(results):
    return {path.parent.name: path.read_text() for path in sorted(results.rglob("*_submission.sh"))}


def test_the_tiny_set_renders_as_one_job_of_its_program(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=rlhf/tiny_preferences"], results=results)
    assert code == 0, err
    ((stage, job, *_),) = plan_rows(out)
    assert (stage, job) == ("data_preparation", "nemo-megatron-tiny_preferences_preference_tiny")
    (script,) = _scripts(results).values()
    assert f"-m nemo_launcher.jobs.data.preference_tiny --config {results}/tiny_preferences/" in script
    assert "gpus-per-node" not in script
    subprocess.run(["bash", "-n", "-c", script], check=True)


def test_the_comparisons_config_renders_and_a_real_run_refuses_a_missing_input(launch, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    choice = ["stages=[data_preparation]", "data_preparation=rlhf/convert_comparisons", f"data_dir={data}"]
    code, out, err = launch(choice, results=results)
    assert code == 0, err
    (script,) = _scripts(results).values()
    assert "-m nemo_launcher.jobs.data.preference_comparisons --config " in script
    real = [*choice, "cluster_type=interactive", "check_inputs=true"]
    code, out, err = launch(real, debug=False, results=tmp_path / "real")
    assert code == 2
    assert f"data_preparation.inputs.train='{data}/rlhf/hh_rlhf/train.jsonl': no such file" in err, err
    assert not (tmp_path / "real").exists() and not (data / "rlhf").exists()


def test_an_interactive_run_writes_the_tiny_set_in_seconds(launch, tmp_path):
    data = tmp_path / "data"
    started = time.monotonic()
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=rlhf/tiny_preferences",
            "cluster_type=interactive",
            f"data_dir={data}",
        ],
        debug=False,
    )
    seconds = time.monotonic() - started
    assert code == 0, err
    assert seconds < 30, seconds  # the quick start's budget is 3 minutes for every stage
    folder = data / "rlhf" / "tiny_preferences"
    directory = str(folder)
    metadata = json.loads((folder / pd.METADATA_FILE).read_text())
    for split in pd.SPLITS:
        assert len(Path(pd.pairs_file(directory, split)).read_text().splitlines()) == metadata["pairs"][split]
        assert Path(sft_file(directory, split)).read_text().startswith('{"input": "Question about the ')
    for split in ("train", "validation"):
        assert Path(pd.prompts_file(directory, split)).read_text().startswith('{"prompt": [')
    assert all(Path(corpus_prefix(directory) + suffix).stat().st_size for suffix in (".bin", ".idx"))
    assert metadata["tokenizer"]["vocab_file"] == str(REPO_ROOT / "corpora" / "tiny_bpe" / "vocab.json")


def test_a_value_the_schema_refuses_stops_the_launch_with_one_line(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=rlhf/tiny_preferences",
            "data_preparation.responses_per_prompt=5",
            "cluster_type=interactive",
        ],
        debug=False,
        results=results,
    )
    assert code == 2
    assert "data_preparation.words_per_response=6: 5 ranked responses differ by two agreeable words each" in err, err
    assert not results.exists()
