"""The measured-steps file: written whole, and a file that is not a record reads as nothing measured yet."""

import pytest

from nemo_launcher.contract.measured_steps import measured_steps_path, read_measured_steps, write_measured_steps


def test_a_record_reads_back_and_leaves_no_partial_file(tmp_path):
    write_measured_steps(tmp_path, {"step": 4, "max_steps": 8, "step_time_s": 0.25, "tokens_per_s": 512.0})
    assert read_measured_steps(tmp_path)["step_time_s"] == 0.25
    assert [p.name for p in tmp_path.iterdir()] == ["measured_steps.json"]


@pytest.mark.parametrize(
    "text",
    ["", "{", "[1, 2]", '{"step": 3}', '{"step_time_s": 0}', '{"step_time_s": "fast"}', '{"step_time_s": NaN}'],
)
def test_what_is_not_a_measured_step_reads_as_none(tmp_path, text):
    measured_steps_path(tmp_path).write_text(text)
    assert read_measured_steps(tmp_path) is None


def test_no_file_reads_as_none(tmp_path):
    assert read_measured_steps(tmp_path / "not-yet") is None
