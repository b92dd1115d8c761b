"""The data steps as Slurm array jobs chained with aftercorr, on a real Slurm (the local cluster in CI).

This is the job side of the contract: each array task reads SLURM_ARRAY_TASK_ID as its file number and handles
that shard only; task i of extract waits for task i of download, and of preprocess for task i of extract. The
launch side renders the same three sbatch calls from conf/data_preparation (its own tests cover the scripts).
"""

import subprocess
import sys
import time

from tests.jobs.data_support import REPO, reference_dataset, same_files  # noqa: F401

from .test_data_steps import resolved


def _sbatch(tmp_path, step, config, dependency=None):
    argv = [
        "sbatch",
        "--parsable",
        "--array=0-2",
        "--ntasks=1",
        "--cpus-per-task=1",
        f"--job-name=data_{step}",
        f"--output={tmp_path}/log-{step}_%A_%a.out",
        "--chdir",
        str(REPO),
    ]
    if dependency:
        argv.append(f"--dependency=aftercorr:{dependency}")
    argv.append(f"--wrap={sys.executable} -u -m nemo_launcher.jobs.data.{step} --config {config}")
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout
    return out.strip().split(";")[0]


def test_download_extract_preprocess_as_chained_arrays(slurm_cluster, tmp_path):
    config = resolved("gpt3/tiny_pile", tmp_path, "progress=false", "run.workers_per_node=1")
    download = _sbatch(tmp_path, "download", config)
    extract = _sbatch(tmp_path, "extract", config, download)
    preprocess = _sbatch(tmp_path, "preprocess", config, extract)
    deadline = time.monotonic() + 180
    while subprocess.run(
        ["squeue", "-h", "-j", ",".join((download, extract, preprocess))], capture_output=True, text=True, timeout=30
    ).stdout.strip():
        assert time.monotonic() < deadline, "array jobs still queued or running after 180 s"
        time.sleep(0.5)
    logs = {path.name: path.read_text() for path in tmp_path.glob("log-*.out")}
    assert len(logs) == 9, sorted(logs)
    for task in range(3):
        # Each array task handled its own shard and no other.
        text = logs[f"log-download_{download}_{task}.out"]
        assert f"shard {task}: " in text and all(f"shard {o}: " not in text for o in range(3) if o != task), text
    prefixes = sorted((tmp_path / "data" / "tiny_pile" / "preprocessed").glob("*.idx"))
    assert len(prefixes) == 3, logs
    from nemo_launcher.jobs.common.tokenizer import TokenizerSpec
    from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer

    bpe = tmp_path / "data" / "bpe"
    tokenizer = load_tokenizer(
        TokenizerSpec("megatron", "GPT2BPETokenizer", str(bpe / "vocab.json"), str(bpe / "merges.txt"))
    )
    reference_dataset(str(tmp_path / "data" / "tiny_pile" / "extracted" / "01.jsonl"), str(tmp_path / "ref"), tokenizer)
    assert same_files(
        tmp_path / "ref.bin", tmp_path / "data" / "tiny_pile" / "preprocessed" / "tiny_pile_01_text_document.bin"
    )
