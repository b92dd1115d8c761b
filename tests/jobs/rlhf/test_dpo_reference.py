"""The DPO reference job's files across reruns: a rerun keeps the copies written for the same data and model and
computes only what is missing or stale; the trainer refuses a stale copy; data of another vocabulary is refused.

OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_dpo_reference.py -q
"""

import json
import shutil

from nemo_launcher.contract import preference_data as pd

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)
from .dpo_support import dpo_section, run_dpo


def _own_data(preference_dir, folder):  # noqa: F811
    """A copy of the session's tiny set that a test may change."""
    shutil.copytree(preference_dir, folder)
    return folder


def test_a_rerun_keeps_finished_copies_and_computes_only_missing_or_stale_ones(
    rlhf_sft_nemo,
    preference_dir,
    tmp_path,  # noqa: F811
):
    data = _own_data(preference_dir, tmp_path / "data")
    reference = tmp_path / "reference"
    section = dpo_section(rlhf_sft_nemo, data, tmp_path / "run", reference)
    first = run_dpo("rlhf_dpo_reference", section, tmp_path).stdout
    assert "splits  computed, computed" in first
    copies = {split: pd.pairs_file(str(reference), split) for split in ("train", "validation")}
    written = {split: open(path).read() for split, path in copies.items()}
    stamps = {split: tmp_path.joinpath(path).stat().st_mtime_ns for split, path in copies.items()}

    again = run_dpo("rlhf_dpo_reference", section, tmp_path).stdout
    assert "splits  kept, kept" in again
    assert {split: tmp_path.joinpath(path).stat().st_mtime_ns for split, path in copies.items()} == stamps

    # a run killed while writing leaves a partial file under another name and no copy: only that split is redone
    tmp_path.joinpath(copies["validation"]).unlink()
    tmp_path.joinpath(copies["validation"] + ".partial").write_text('{"prompt": [1], "chosen"')
    resumed = run_dpo("rlhf_dpo_reference", section, tmp_path).stdout
    assert "splits  kept, computed" in resumed
    assert open(copies["validation"]).read() == written["validation"]

    # new validation data: its copy is stale, and the trainer refuses it until the reference job has run again
    source = pd.pairs_file(str(data), "validation")
    lines = open(source).read().splitlines(keepends=True)
    open(source, "w").write("".join(lines[:-1]))
    refused = run_dpo("rlhf_dpo", section, tmp_path / "run", expect_rc=2)
    assert "rlhf_dpo.model.reference.output_dir: " in refused.stderr and "run the reference job again" in refused.stderr
    redone = run_dpo("rlhf_dpo_reference", section, tmp_path).stdout
    assert "splits  kept, computed" in redone
    assert sum(1 for _ in open(copies["validation"])) == len(lines) - 1
    assert open(copies["train"]).read() == written["train"]


def test_data_of_another_vocabulary_is_refused_before_any_forward_pass(
    rlhf_sft_nemo,
    preference_dir,
    tmp_path,  # noqa: F811
):
    data = _own_data(preference_dir, tmp_path / "data")
    metadata = json.loads((data / pd.METADATA_FILE).read_text())
    metadata["tokenizer"]["vocab_size"] = 50257  # GPT-2's, the tiny policy has the tiny BPE's 2,048
    (data / pd.METADATA_FILE).write_text(json.dumps(metadata))
    section = dpo_section(rlhf_sft_nemo, data, tmp_path / "run", tmp_path / "reference")
    refused = run_dpo("rlhf_dpo_reference", section, tmp_path, expect_rc=2)
    error = refused.stderr.strip().splitlines()[-1]
    assert "rlhf_dpo.model.data.data_dir" in error and "50257" in error and "2048" in error, refused.stderr
    assert not (tmp_path / "reference" / "train_pairs.jsonl").exists()


def test_two_data_parallel_ranks_share_the_pairs_and_write_one_reference_run_s_values(
    rlhf_sft_nemo,
    preference_dir,
    tmp_path,  # noqa: F811
):
    """DP 2 (two processes, TP 1): each rank scores every other pair, rank 0 gathers and writes them in file order."""
    one = dpo_section(rlhf_sft_nemo, preference_dir, tmp_path / "one", tmp_path / "one" / "reference")
    run_dpo("rlhf_dpo_reference", one, tmp_path / "one")
    two = dpo_section(rlhf_sft_nemo, preference_dir, tmp_path / "two", tmp_path / "two" / "reference")
    two["trainer"]["devices"] = 2
    run_dpo("rlhf_dpo_reference", two, tmp_path / "two", processes=2)
    for split in ("train", "validation"):
        ones = [json.loads(line) for line in open(pd.pairs_file(str(tmp_path / "one" / "reference"), split))]
        twos = [json.loads(line) for line in open(pd.pairs_file(str(tmp_path / "two" / "reference"), split))]
        assert len(ones) == len(twos)
        for a, b in zip(ones, twos):
            assert {k: a[k] for k in ("prompt", "chosen", "rejected")} == {
                k: b[k] for k in ("prompt", "chosen", "rejected")
            }
            assert abs(a["ref_chosen"] - b["ref_chosen"]) < 1e-5 and abs(a["ref_rejected"] - b["ref_rejected"]) < 1e-5


def test_a_tensor_parallel_size_the_model_cannot_take_is_refused_by_the_reference_job(
    rlhf_sft_nemo,
    preference_dir,
    tmp_path,  # noqa: F811
):
    """The launcher's model rules hold in the reference job as in the trainer: TP 3 does not divide the tiny model's
    4 heads (a .nemo the launcher could not read is checked here before a weight is loaded)."""
    section = dpo_section(
        rlhf_sft_nemo, preference_dir, tmp_path / "run", tmp_path / "reference", tensor_model_parallel_size=3
    )
    section["trainer"]["devices"] = 3
    section["model"]["global_batch_size"] = 24
    # torchrun exits 1 whatever status its ranks chose (srun passes their 2 on); each rank says why in one line
    refused = run_dpo("rlhf_dpo_reference", section, tmp_path, processes=3, expect_rc=1)
    assert "Error: rlhf_dpo.model.tensor_model_parallel_size=3: the model" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "reference" / "train_pairs.jsonl").exists()
