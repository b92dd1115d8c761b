"""The GPT inference search without running a model: what the launcher refuses (one line, exit 2, nothing written),
the grid it plans against the archive's model, the benchmark program's bookkeeping when a setting crashes, and the
analysis (final_output.csv by measured throughput, a failed setting shifting nobody's numbers). The archive here is
a `.nemo` holding only its model_config.yaml: everything the launcher reads of one, no torch needed.
tests/autoconfig/test_inference_runs.py runs the search on a real tiny GPT, here and on Slurm."""

import csv
import io
import os
import re
import tarfile

import pytest
import yaml

from nemo_launcher.contract.autoconfig_inference import (
    RESULT_FILE,
    Benchmark,
    InferenceManifest,
    InferenceSetting,
    read_inference_manifest,
)
from nemo_launcher.contract.autoconfig_search import failures_in, read_json, write_status
from nemo_launcher.jobs.autoconfig import inference_analysis, inference_benchmark
from nemo_launcher.jobs.common.config import JobConfigError

from .support import run_autoconfig

KEY = "search_config.inference_settings"


def model_only_nemo(path, heads: int = 4, positions: int = 64, **sizes):
    """A .nemo with a GPT's model_config.yaml (2 layers, hidden 64 unless `sizes` say otherwise) and no weights."""
    config = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": heads, "max_position_embeddings": positions}
    config.update(sizes)
    text = yaml.safe_dump(config).encode()
    member = tarfile.TarInfo("model_config.yaml")
    member.size = len(text)
    with tarfile.open(path, "w") as archive:
        archive.addfile(member, io.BytesIO(text))
    return path


def _search(tmp_path, *overrides, search="gpt3/tiny"):
    return [
        f"search_config={search}",
        "run_training_hp_search=False",
        f"base_results_dir={tmp_path / 'results'}",
        *overrides,
    ]


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "cluster_type=bcp",
            "Error: cluster_type='bcp': the inference search runs on Slurm (BCM only, as in the seed) or here",
        ),
        (
            f"{KEY}.run.pipeline_parallel_sizes=[1,2]",
            f"Error: {KEY}.run.pipeline_parallel_sizes=[1, 2]: the benchmark generates on one pipeline stage",
        ),
        (f"{KEY}.benchmark.beam_width=4", f"Error: {KEY}.benchmark.beam_width=4: beam search is not implemented"),
        (
            f"{KEY}.benchmark.output_len=60",
            f"Error: {KEY}.benchmark.output_len=60: input_len + output_len = 76 exceeds the model's 64 positions",
        ),
        (f"{KEY}.benchmark.topp=1.5", f"Error: {KEY}.benchmark.topp=1.5: must lie in [0, 1]"),
        (f"{KEY}.run.data_type=int8", f"Error: {KEY}.run.data_type='int8': one of fp32, fp16, bf16"),
        (
            f"{KEY}.run.tensor_parallel_sizes=[3]",
            f"Error: {KEY}.run.tensor_parallel_sizes=[3]: no setting is left (2 dropped: TP 3 does not divide the 4 "
            "attention heads)",
        ),
    ],
    ids=["bcp", "pipeline_parallel", "beam_search", "too_long", "topp", "data_type", "no_tp_splits_the_heads"],
)
def test_refused_before_anything_is_written(tmp_path, capsys, override, expected):
    nemo = model_only_nemo(tmp_path / "model.nemo")
    code, _, err = run_autoconfig(_search(tmp_path, f"{KEY}.run.nemo_file={nemo}", override), capsys)
    assert code == 2
    assert _one_error_line(err).startswith(expected), err
    assert not (tmp_path / "results").exists()


def test_a_missing_archive_names_the_conversion_path(tmp_path, capsys):
    code, _, err = run_autoconfig(_search(tmp_path), capsys)
    assert code == 2
    default = tmp_path / "results" / "gpt3_tiny" / "convert_nemo" / "results" / "megatron_gpt.nemo"
    assert _one_error_line(err) == (
        f"Error: {KEY}.run.nemo_file='{default}': no .nemo there: convert the trained model first "
        "(main.py stages=[conversion]), name one, or set run_inference_hp_search=False"
    )


def test_the_seeds_pipeline_parallel_search_is_refused_as_it_stands(tmp_path, capsys):
    """gpt3/20b's inference_settings keep the seed's PP [1, 2]: refused before the archive is even looked for."""
    code, _, err = run_autoconfig(_search(tmp_path, search="gpt3/20b"), capsys)
    assert code == 2
    assert _one_error_line(err).startswith(f"Error: {KEY}.run.pipeline_parallel_sizes=[1, 2]: ")


def test_slurm_plan_one_array_of_the_settings_the_model_splits(tmp_path, capsys):
    nemo = model_only_nemo(tmp_path / "model.nemo", heads=4)
    code, out, err = run_autoconfig(
        _search(tmp_path, f"{KEY}.run.nemo_file={nemo}", f"{KEY}.run.tensor_parallel_sizes=[1,2,3]"), capsys
    )
    assert code == 0, err
    assert "Inference search: 6 settings in the grid, 4 run" in out
    assert "  2 dropped: TP 3 does not divide the 4 attention heads" in out
    folder = tmp_path / "results" / "gpt3" / "tiny" / "inference"
    manifest = read_inference_manifest(folder / "inference_manifest.json")
    assert [(s.item, s.tp, s.pp, s.batch_size) for s in manifest.settings] == [
        (0, 1, 1, 1),
        (1, 1, 1, 4),
        (2, 2, 1, 1),
        (3, 2, 1, 4),
    ]
    assert manifest.benchmark == Benchmark(input_len=16, output_len=8, beam_width=1, topk=4, topp=0.0, seed=1234)
    (script,) = folder.glob("*inference_search_submission.sh")
    text = script.read_text()
    assert "#SBATCH --array=0-3%1" in text  # one at a time: train_settings.max_parallel_runs
    assert "#SBATCH --ntasks-per-node=1" in text
    assert "-m nemo_launcher.jobs.autoconfig.inference_benchmark --manifest" in text
    assert "afterany:DRYRUN-1" in out


def test_settings_predicted_over_the_gpu_memory_are_dropped(tmp_path, capsys):
    """A 175B-sized GPT in fp16: about 85 GiB per GPU at TP 4 (over 80 GB), 44 GiB at TP 8."""
    sizes = {"num_layers": 96, "hidden_size": 12288, "ffn_hidden_size": 49152, "encoder_seq_length": 2048}
    nemo = model_only_nemo(tmp_path / "model.nemo", heads=96, positions=2048, **sizes)
    overrides = [f"{KEY}.run.tensor_parallel_sizes=[4,8]", f"{KEY}.run.gpus_per_node=8", f"{KEY}.run.data_type=fp16"]
    code, out, err = run_autoconfig(_search(tmp_path, f"{KEY}.run.nemo_file={nemo}", *overrides), capsys)
    assert code == 0, err
    assert "Inference search: 4 settings in the grid, 2 run" in out
    for batch in (1, 4):
        assert re.search(rf"  1 dropped: TP 4 batch {batch}: predicted 8\d\.\d GiB per GPU, over the 80 GB", out), out
    manifest = read_inference_manifest(tmp_path / "results" / "gpt3" / "tiny" / "inference" / "inference_manifest.json")
    assert {setting.tp for setting in manifest.settings} == {8}


# ---- the benchmark program's bookkeeping ----------------------------------------------------------------------


def _manifest(tmp_path, tps=(1, 1, 2, 2), batches=(1, 4, 1, 4)) -> InferenceManifest:
    settings = [
        InferenceSetting(item, f"gpt3_tiny_tp_{tp}_pp_1_bs_{batch}", str(tmp_path / f"setting{item}"), tp, 1, batch)
        for item, (tp, batch) in enumerate(zip(tps, batches))
    ]
    benchmark = Benchmark(input_len=16, output_len=8, beam_width=1, topk=4, topp=0.0, seed=1234)
    return InferenceManifest(
        "gpt3_tiny", str(tmp_path / "model.nemo"), "fp32", benchmark, str(tmp_path / "final_summary"), settings
    )


def _write_manifest(tmp_path, manifest: InferenceManifest):
    path = tmp_path / "inference_manifest.json"
    path.write_text(manifest.to_json())
    return path


def test_a_crashed_setting_records_why_and_the_next_one_still_runs(tmp_path, monkeypatch):
    manifest = _manifest(tmp_path)
    path = _write_manifest(tmp_path, manifest)
    for variable in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(variable, raising=False)

    def measure(manifest, setting):
        if setting.item == 0:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {"tokens_per_s": 40.0, "latency_s": 0.8, "first_token_latency_s": 0.1}

    monkeypatch.setattr(inference_benchmark, "measure", measure)
    assert inference_benchmark.run_setting(str(path), 0, keep_going=True) == 0
    assert inference_benchmark.run_setting(str(path), 1, keep_going=True) == 0
    crashed, measured = manifest.settings[0].run_dir, manifest.settings[1].run_dir
    (record,) = failures_in(crashed)
    assert record["reason"] == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert read_json(f"{crashed}/candidate_status.json")["state"] == "failed"
    assert read_json(f"{measured}/candidate_status.json")["state"] == "finished"
    assert read_json(f"{measured}/{RESULT_FILE}")["tokens_per_s"] == 40.0
    with pytest.raises(RuntimeError):  # without --keep-going the error ends the task, recorded all the same
        inference_benchmark.run_setting(str(path), 0, keep_going=False)


def test_the_job_applies_the_launchers_rules_to_the_archive_it_opens(tmp_path):
    manifest = _manifest(tmp_path, tps=(3,), batches=(1,))
    model_only_nemo(tmp_path / "model.nemo", heads=4)
    with pytest.raises(JobConfigError, match="TP 3 does not divide the 4 attention heads"):
        inference_benchmark.check_archive(manifest, manifest.settings[0])
    short = _manifest(tmp_path, tps=(1,), batches=(1,))
    model_only_nemo(tmp_path / "model.nemo", positions=20)
    with pytest.raises(JobConfigError, match="input_len \\+ output_len = 24 exceeds the model's 20 positions"):
        inference_benchmark.check_archive(short, short.settings[0])


# ---- the analysis ------------------------------------------------------------------------------------------


def _result(tokens_per_s: float, latency_s: float) -> dict:
    return {"tokens_per_s": tokens_per_s, "latency_s": latency_s, "first_token_latency_s": latency_s / 8}


def test_summary_by_measured_throughput_with_failures_after(tmp_path, capsys):
    manifest = _manifest(tmp_path)
    path = _write_manifest(tmp_path, manifest)
    runs = [setting.run_dir for setting in manifest.settings]
    # Written last-item first: the order the settings ended in must not matter.
    write_status(runs[3], _result(150.0, 0.21), RESULT_FILE)
    write_status(runs[2], {"state": "started"}, "candidate_status.json")
    write_status(runs[2], {"rank": 1, "reason": "error: RuntimeError: gloo timed out"}, "candidate_failure.1.json")
    # Item 1 left nothing; its own Slurm log says why (array job 77, task 1).
    (tmp_path / "log-gpt3_tiny_inference_search_77_1_attempt0.err").write_text("CANCELLED DUE TO TIME LIMIT\n")
    write_status(runs[0], _result(280.0, 0.03), RESULT_FILE)
    assert inference_analysis.main(["--manifest", str(path)]) == 0
    with open(tmp_path / "final_summary" / "final_output.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["rank"], row["name"]) for row in rows] == [
        ("1", "gpt3_tiny_tp_1_pp_1_bs_1"),
        ("2", "gpt3_tiny_tp_2_pp_1_bs_4"),
        ("", "gpt3_tiny_tp_1_pp_1_bs_4"),
        ("", "gpt3_tiny_tp_2_pp_1_bs_1"),
    ]
    assert [row["throughput_tokens_per_s"] for row in rows[:2]] == ["280", "150"]
    assert rows[1]["latency_s"] == "0.21" and rows[1]["tp"] == "2" and rows[1]["batch_size"] == "4"
    assert rows[2]["status"].startswith("failed: time limit")
    assert rows[3]["status"] == "failed: error: RuntimeError: gloo timed out"
    out = capsys.readouterr().out
    assert "2 of 4 settings measured" in out
    # The quickest setting is also the fastest here: it is the best within every latency budget.
    assert "  within 0.03 s per batch: gpt3_tiny_tp_1_pp_1_bs_1 at 280 tokens/s" in out
    assert "within 0.21 s" not in out


def test_best_setting_per_latency_budget():
    settings = [InferenceSetting(i, f"s{i}", "", 1, 1, b) for i, b in enumerate((1, 4, 16, 8))]
    measured = [
        inference_analysis.Measured(settings[0], _result(100.0, 0.05), None),
        inference_analysis.Measured(settings[1], _result(300.0, 0.10), None),
        inference_analysis.Measured(settings[2], _result(500.0, 0.40), None),
        inference_analysis.Measured(settings[3], _result(250.0, 0.30), None),  # slower and later than s1: never best
    ]
    front = inference_analysis.best_within_latency(measured)
    assert [o.setting.name for o in front] == ["s0", "s1", "s2"]


def test_no_measured_setting_exits_1_and_still_writes_why(tmp_path):
    manifest = _manifest(tmp_path, tps=(1,), batches=(1,))
    path = _write_manifest(tmp_path, manifest)
    assert inference_analysis.main(["--manifest", str(path)]) == 1
    text = (tmp_path / "final_summary" / "final_output.csv").read_text()
    assert "failed: never started" in text


def test_a_previous_runs_numbers_do_not_count(tmp_path):
    """A search rerun into the same folders: a setting of this run that never started keeps the result file of the
    run before, older than this run's manifest; it is reported as never started, not with the old numbers."""
    manifest = _manifest(tmp_path, tps=(1, 2), batches=(1, 1))
    old = manifest.settings[0].run_dir
    write_status(old, _result(999.0, 0.01), RESULT_FILE)
    write_status(old, {"rank": 0, "reason": "error: an old crash"}, "candidate_failure.0.json")
    for path in (tmp_path / "setting0").iterdir():
        os.utime(path, (1_000_000_000, 1_000_000_000))
    path = _write_manifest(tmp_path, manifest)
    write_status(manifest.settings[1].run_dir, _result(50.0, 0.2), RESULT_FILE)
    assert inference_analysis.main(["--manifest", str(path)]) == 0
    with open(tmp_path / "final_summary" / "final_output.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["name"], row["throughput_tokens_per_s"]) for row in rows] == [
        ("gpt3_tiny_tp_2_pp_1_bs_1", "50"),
        ("gpt3_tiny_tp_1_pp_1_bs_1", ""),
    ]
    assert rows[1]["status"].startswith("failed: never started")


def test_a_family_without_inference_settings_is_skipped_with_a_note(tmp_path, capsys):
    code, out, err = run_autoconfig(_search(tmp_path, search="t5/0.22b"), capsys)
    assert code == 0, err
    assert err.strip() == (
        "Note: run_inference_hp_search=True: t5/0.22b has no inference_settings (the inference search is GPT's "
        "only): skipped (set run_inference_hp_search=False to silence this)"
    )
    assert "Inference search" not in out
