"""The conversion_nemo2hf stage at launch: one CPU process running the GPT family's export program on the .nemo
named, refusing in one line what the job could not export (the program itself: tests/jobs/gpt/test_export_hf.py)."""

import pytest
import yaml


def test_the_export_is_one_process_of_the_gpt_export_program(launch, tmp_path):
    results = tmp_path / "results"
    nemo = tmp_path / "merged.nemo"
    code, out, err = launch(
        [
            "stages=[conversion_nemo2hf]",
            "conversion_nemo2hf=llama/nemo_to_hf",
            f"conversion_nemo2hf.model.nemo_file={nemo}",
            "check_inputs=true",
        ],
        results=results,
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    text = script.read_text()
    assert "nemo_launcher.jobs.gpt.export_hf" in text and "#SBATCH --nodes=1\n" in text
    assert "#SBATCH --ntasks-per-node=1\n" in text
    assert f"a real run would refuse conversion_nemo2hf.model.nemo_file='{nemo}'" in err
    (config,) = results.rglob("*_hydra.yaml")
    resolved = yaml.safe_load(config.read_text())
    assert resolved["model"]["output_dir"] == f"{results}/llama2_7b/nemo_to_hf/results/hf"


@pytest.mark.parametrize(
    "override, words",
    [
        ("conversion_nemo2hf.model.nemo_file=/models/step-0", "name a .nemo file"),
        ("conversion_nemo2hf.model.nemo_file=models/a.nemo", "must be an absolute path"),
        ("conversion_nemo2hf.run.ntasks_per_node=2", "the export merges the .nemo's shards in one process: set 1"),
    ],
)
def test_what_the_export_cannot_do_is_refused_at_launch(override, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[conversion_nemo2hf]", "conversion_nemo2hf=llama/nemo_to_hf", override], results=results
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0], err
    assert not list(results.rglob("*_submission.sh"))
