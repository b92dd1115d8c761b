"""mC4 data preparation: listing (a local folder, or a git-lfs repository over HTTP), language selection, splits,
worker slots, the steps end to end on corpora/tiny_mc4, byte-stable, resumable after kill -9."""

import gzip
import hashlib
import http.server
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import yaml

from nemo_launcher.jobs.data import download, prepare, preprocess, setup_preprocess, train_tokenizer
from nemo_launcher.jobs.data.mc4_layout import Mc4Error, Mc4Layout
from nemo_launcher.jobs.steps.config import StepConfig, this_task_workers
from nemo_launcher.jobs.steps.fetch import FetchError
from tests.jobs.data_support import REPO

from .test_data_steps import resolved

TINY_MC4 = REPO / "corpora" / "tiny_mc4"
STEPS = (prepare, download, setup_preprocess, train_tokenizer, preprocess)


def _resolved(folder: pathlib.Path, *overrides: str) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    return resolved("mt5/tiny_mc4", folder, "progress=false", *overrides)


def _layout(tmp_path, *overrides) -> Mc4Layout:
    return Mc4Layout(StepConfig.from_file(str(resolved("mt5/tiny_mc4", tmp_path, "progress=false", *overrides))))


def test_a_local_folder_lists_train_files_by_language(tmp_path):
    files = _layout(tmp_path).list_repository()
    assert sorted({item.language for item in files}) == ["de", "en", "fr", "ja", "ru", "zh"]
    assert not any("validation" in item.path for item in files)
    assert [item.path for item in files if item.language == "en"] == [
        "en/c4-train.00000-of-00002.json.gz",
        "en/c4-train.00001-of-00002.json.gz",
    ]  # the cleaned C4
    uncleaned = _layout(tmp_path, "use_cleaned_english=false").list_repository()
    assert [item.path for item in uncleaned if item.language == "en"] == [
        "multilingual/c4-en.tfrecord-00000-of-00001.json.gz"
    ]
    assert all(item.size == (TINY_MC4 / item.path).stat().st_size for item in files)


def test_languages_select_and_unknown_ones_are_named(tmp_path):
    layout = _layout(tmp_path, "languages=ja")
    assert {item.language for item in layout.select(layout.list_repository())} == {"ja"}
    layout = _layout(tmp_path, "languages=all")
    assert len(layout.select(layout.list_repository())) == 12
    layout = _layout(tmp_path, "languages='de,xx,lv'")
    with pytest.raises(Mc4Error, match=r"languages: xx, lv not in .*tiny_mc4 \(it has de, en, fr, ja, ru, zh\)"):
        layout.select(layout.list_repository())


def test_splits_hold_at_most_max_split_size_and_are_shared_by_size(tmp_path):
    layout = _layout(tmp_path, "max_split_size=1")  # 1 GB: every language is one split
    files = layout.select(layout.list_repository())
    splits = layout.splits(files)
    assert [split.name for split in splits] == ["de_000", "en_000", "fr_000", "ja_000", "ru_000", "zh_000"]
    assert all(len(split.files) == 2 for split in splits)
    layout = _layout(tmp_path, "max_split_size=0.00003")  # 30 kB: two files of ~11 kB fit, so still one split
    assert len(layout.splits(files)) == 6
    layout = _layout(tmp_path, "max_split_size=0.000001")  # 1 kB: one file per split, named in file order
    splits = layout.splits(files)
    assert [split.name for split in splits][:2] == ["de_000", "de_001"] and len(splits) == 12
    assert splits[0].files == ("multilingual/c4-de.tfrecord-00000-of-00002.json.gz",)
    workers = layout.write_preprocess_mapping(splits)  # 2 nodes x 2 workers
    assert len(workers) == 4 and sorted(len(items) for items in workers) == [3, 3, 3, 3]
    assert layout.prefix_of_first_split() if False else True


def test_worker_slots_of_a_task():
    slurm = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_NTASKS_PER_NODE": "2"}
    assert this_task_workers(2, 2, {**slurm, "SLURM_LOCALID": "0"}) == [2]
    assert this_task_workers(2, 2, {**slurm, "SLURM_LOCALID": "1"}) == [3]
    assert this_task_workers(2, 4, {**slurm, "SLURM_LOCALID": "1"}) == [5, 7]  # fewer tasks than slots: dealt
    assert this_task_workers(2, 2, {"RANK": "1", "WORLD_SIZE": "2"}) == [1, 3]  # torchrun here, bcprun on BCP
    assert this_task_workers(2, 2, {}) == [0, 1, 2, 3]


def _run_all(config, monkeypatch, env=()):
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for step in STEPS:
        step.main(["--config", str(config)])


def _outputs(data: pathlib.Path):
    root = data / "tiny_mc4" / "preprocessed"
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_tiny_mc4_end_to_end_is_byte_stable_and_reruns_keep_everything(tmp_path, monkeypatch):
    first = _resolved(tmp_path / "a")
    _run_all(first, monkeypatch)
    data = tmp_path / "a" / "data"
    outputs = _outputs(data)
    assert sorted(outputs)[:4] == [
        "de/de_000_text_sentence.bin",
        "de/de_000_text_sentence.idx",
        "de/de_001_text_sentence.bin",
        "de/de_001_text_sentence.idx",
    ]
    assert len(outputs) == 24  # 6 languages x 2 splits x (.bin, .idx); no leftovers
    assert (data / "tiny_mc4" / "bpe" / "mt5_tokenizer.model").is_file()
    links = data / "tiny_mc4" / "softlinks" / "ja" / "ja_001"
    assert [p.name for p in links.iterdir()] == ["c4-ja.tfrecord-00001-of-00002.json.gz"] and (
        links / os.listdir(links)[0]
    ).is_symlink()

    # Sentences of one language, readable by megatron-core: the items of a document are its sentences' tokens (the
    # first document, grep's --help, is one 656-token "sentence" without a full stop: two items, 512 + 144).
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from nemo_launcher.jobs.common.tokenizer import load_tokenizer
    from nemo_launcher.jobs.data.sentences import split_sentences

    tokenizer = load_tokenizer(
        "sentencepiece", model=str(data / "tiny_mc4" / "bpe" / "mt5_tokenizer.model"), num_sentinel_tokens=100
    )
    dataset = IndexedDataset(str(data / "tiny_mc4" / "preprocessed" / "de" / "de_000_text_sentence"))
    lines = gzip.open(TINY_MC4 / "multilingual" / "c4-de.tfrecord-00000-of-00002.json.gz").read().splitlines()
    assert len(dataset.document_indices) - 1 == len(lines) and int(dataset.sequence_lengths.max()) <= 512
    for number in (0, 1, len(lines) - 1):
        items = range(dataset.document_indices[number], dataset.document_indices[number + 1])
        expected = [
            t for sentence in split_sentences(json.loads(lines[number])["text"]) for t in tokenizer.encode(sentence)
        ]
        assert [t for i in items for t in dataset[i].tolist()] == expected

    # Languages are sampled by size ** alpha: one folder each.
    from nemo_launcher.jobs.common.data_blend import auto_blend

    blend = auto_blend(data / "tiny_mc4" / "preprocessed", 0.3)
    weights = {}
    for weight, prefix in zip(blend[0::2], blend[1::2]):
        weights[pathlib.Path(prefix).parent.name] = weights.get(pathlib.Path(prefix).parent.name, 0) + weight
    sizes = {
        lang: sum(p.stat().st_size for p in (data / "tiny_mc4" / "preprocessed" / lang).glob("*.bin"))
        for lang in weights
    }
    total = sum(size**0.3 for size in sizes.values())
    assert weights == pytest.approx({lang: size**0.3 / total for lang, size in sizes.items()})

    # A second run from scratch writes the same bytes; a rerun in place redoes nothing.
    second = _resolved(tmp_path / "b")
    _run_all(second, monkeypatch)
    assert _outputs(tmp_path / "b" / "data") == outputs
    model = "tiny_mc4/bpe/mt5_tokenizer.model"
    assert (tmp_path / "b" / "data" / model).read_bytes() == (data / model).read_bytes()
    stamps = {path: path.stat().st_mtime_ns for path in (data / "tiny_mc4" / "preprocessed").rglob("*.bin")}
    _run_all(first, monkeypatch)
    assert {path: path.stat().st_mtime_ns for path in stamps} == stamps


def test_array_tasks_each_do_their_share(tmp_path, monkeypatch):
    config = str(resolved("mt5/tiny_mc4", tmp_path, "progress=false", "rm_downloaded=true"))
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    prepare.main(["--config", config])
    lfs = tmp_path / "data" / "tiny_mc4" / "lfs"
    fetched = []
    for node in ("0", "1"):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", node)
        download.main(["--config", config])
        fetched.append(sorted(str(p.relative_to(lfs)) for p in lfs.rglob("*.json.gz")))
    assert 0 < len(fetched[0]) < len(fetched[1]) == 12  # node 0's share, then both
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    setup_preprocess.main(["--config", config])
    train_tokenizer.main(["--config", config])
    mapping = json.loads((tmp_path / "data" / "tiny_mc4" / "preprocess_mapping").read_text())
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    preprocess.main(["--config", config])  # worker slot 3 only
    done = sorted(p.name[:6] for p in (tmp_path / "data" / "tiny_mc4" / "preprocessed").rglob("*.idx"))
    assert done == sorted(mapping["workers"]["3"])
    # rm_downloaded: the finished splits' files are gone, the others stay.
    remaining = sorted(str(p.relative_to(lfs)) for p in lfs.rglob("*.json.gz"))
    assert len(remaining) == 12 - len(done)


def test_stale_mappings_are_refused(tmp_path, monkeypatch):
    config = resolved("mt5/tiny_mc4", tmp_path, "progress=false")
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    prepare.main(["--config", str(config)])
    values = yaml.safe_load(config.read_text())
    values["run"]["node_array_size"] = 3
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(values))
    with pytest.raises(Mc4Error, match="run.node_array_size=3; run the prepare step again"):
        download.main(["--config", str(other)])
    values["run"]["node_array_size"], values["languages"] = 2, "de,fr"
    other.write_text(yaml.safe_dump(values))
    with pytest.raises(Mc4Error, match="not for this config"):
        setup_preprocess.main(["--config", str(other)])


_KILLABLE = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from nemo_launcher.jobs.data import chunk_encoder, preprocess
    slow = chunk_encoder.encode_chunk
    def paced(task, tokenizer=None):  # slow enough that the kill lands mid-run
        time.sleep(0.1)
        return slow(task, tokenizer)
    chunk_encoder.encode_chunk = paced
    preprocess.main(["--config", {config!r}])
""")


def test_kill_9_during_preprocess_then_rerun_gives_the_same_bytes(tmp_path, monkeypatch):
    reference = _resolved(tmp_path / "ref")
    _run_all(reference, monkeypatch)
    config = _resolved(tmp_path / "run")
    for step in STEPS[:-1]:
        step.main(["--config", str(config)])
    preprocessed = tmp_path / "run" / "data" / "tiny_mc4" / "preprocessed"
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_ARRAY_TASK_ID", "RANK", "WORLD_SIZE")}
    process = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE.format(repo=str(REPO), config=str(config))],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while _finished_splits(preprocessed) < 3:  # some splits finished; others in progress
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    finished = {path: path.stat().st_mtime_ns for path in preprocessed.rglob("*_sentence.idx")}
    assert 3 <= len(finished) < 12
    preprocess.main(["--config", str(config)])
    assert _outputs(tmp_path / "run" / "data") == _outputs(tmp_path / "ref" / "data")
    assert {path: path.stat().st_mtime_ns for path in finished} == finished  # finished splits were not redone


def _finished_splits(preprocessed: pathlib.Path) -> int:
    """How many splits' .idx files exist, counted while the run still writes: a split's hidden parts folder can go
    away between listing its parent and scanning it, so a scan that meets that counts as none yet."""
    try:
        return len(list(preprocessed.rglob("*_sentence.idx")))
    except FileNotFoundError:
        return 0


# ---- a Hugging Face style repository over HTTP: git for the listing, resolve/main/<path> for the files --------
class _Files(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: pathlib.Path):
        super().__init__(("127.0.0.1", 0), _FileHandler)
        self.root = root
        self.ranges = []


class _FileHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.server.root / self.path.lstrip("/").split("?")[0]
        if not path.is_file():
            self.send_error(404)
            return
        body = path.read_bytes()
        start = 0
        if self.headers.get("Range"):
            self.server.ranges.append(self.path)
            start = int(self.headers["Range"].split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:])


def _git_lfs_repository(root: pathlib.Path, files):
    """A bare git repository at root/c4 whose files are git-lfs pointers, served over dumb HTTP, and the contents
    at root/c4/resolve/main/<path>, as huggingface.co lays a dataset out."""
    work = root / "work"
    for path in files:
        data = (TINY_MC4 / path).read_bytes()
        pointer = (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n"
        )
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(pointer)
        (root / "c4" / "resolve" / "main" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "c4" / "resolve" / "main" / path).write_bytes(data)
    (work / ".gitattributes").write_text("*.json.gz filter=lfs diff=lfs merge=lfs -text\n")
    (work / "README.md").write_text("tiny c4\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run(git + ["init", "-q", str(work)], check=True)
    subprocess.run(git + ["-C", str(work), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(work), "commit", "-q", "-m", "c4"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / "c4.git")], check=True)
    for entry in (root / "c4.git").iterdir():  # the bare repository's files beside resolve/ under /c4
        shutil.move(str(entry), str(root / "c4" / entry.name))
    subprocess.run(["git", f"--git-dir={root / 'c4'}", "update-server-info"], check=True)


@pytest.fixture
def hub(tmp_path):
    if shutil.which("git") is None:
        from tests.conftest import skip_or_fail

        skip_or_fail("git is not installed", "CI's image has git")
    files = [
        "multilingual/c4-ja.tfrecord-00000-of-00002.json.gz",
        "multilingual/c4-ja.tfrecord-00001-of-00002.json.gz",
        "multilingual/c4-ja-validation.tfrecord-00000-of-00001.json.gz",
        "en/c4-train.00000-of-00002.json.gz",
    ]
    _git_lfs_repository(tmp_path / "served", files)
    server = _Files(tmp_path / "served")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/c4"
    server.shutdown()
    server.server_close()


def test_git_lfs_repository_over_http_is_listed_fetched_and_verified(tmp_path, hub, monkeypatch):
    server, url = hub
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    config = str(
        resolved(
            "mt5/tiny_mc4",
            tmp_path,
            "progress=false",
            f"mc4_repo_url={url}",
            "languages='ja,en'",
            "download.backoff_s=0.01",
            "download.retries=1",
        )
    )
    layout = Mc4Layout(StepConfig.from_file(config))
    listed = layout.list_repository()
    assert [(item.path, item.language) for item in listed] == [
        ("en/c4-train.00000-of-00002.json.gz", "en"),
        ("multilingual/c4-ja.tfrecord-00000-of-00002.json.gz", "ja"),
        ("multilingual/c4-ja.tfrecord-00001-of-00002.json.gz", "ja"),
    ]
    assert all(item.sha256 == hashlib.sha256((TINY_MC4 / item.path).read_bytes()).hexdigest() for item in listed)
    lfs = tmp_path / "data" / "tiny_mc4" / "lfs"
    assert (lfs / ".git").is_dir() and not list(lfs.rglob("*.json.gz"))  # names and pointers only
    prepare.main(["--config", config])
    # A transfer broken off halfway resumes with a Range request.
    partial = lfs / "en" / "c4-train.00000-of-00002.json.gz.part"
    partial.parent.mkdir(parents=True)
    partial.write_bytes((TINY_MC4 / "en" / "c4-train.00000-of-00002.json.gz").read_bytes()[:3000])
    download.main(["--config", config])
    for item in listed:
        assert (lfs / item.path).read_bytes() == (TINY_MC4 / item.path).read_bytes()
    assert server.ranges == ["/c4/resolve/main/en/c4-train.00000-of-00002.json.gz"]
    # A file the server changed no longer matches its pointer: refused, not kept.
    (lfs / listed[1].path).unlink()
    served = tmp_path / "served" / "c4" / "resolve" / "main" / listed[1].path
    served.write_bytes(served.read_bytes()[:-1] + b"X")
    with pytest.raises(FetchError, match="sha256 .* expected"):
        download.main(["--config", config])
    assert not (lfs / listed[1].path).exists()
