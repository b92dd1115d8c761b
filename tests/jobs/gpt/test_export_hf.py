"""The conversion_nemo2hf stage's program (python3 -m nemo_launcher.jobs.gpt.export_hf): what it refuses in one line
before writing anything. Its export itself is nemo_to_hf's (tests/jobs/gpt/test_hf_import.py), run end to end by
tests/test_quickstart_llama.py."""

import yaml

from nemo_launcher.jobs.gpt.export_hf import main as export_hf


def test_the_program_refuses_a_missing_nemo_in_one_line(tmp_path, capsys):
    config = tmp_path / "cfg.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run": {"name": "x", "results_dir": str(tmp_path), "time_limit": "1:00:00"},
                "model": {"nemo_file": str(tmp_path / "absent.nemo"), "output_dir": str(tmp_path / "hf")},
            }
        )
    )
    assert export_hf(["--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent.nemo" in err[0], err
    assert not (tmp_path / "hf").exists()
