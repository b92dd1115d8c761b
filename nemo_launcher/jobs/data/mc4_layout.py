"""mC4 from the config: which repository files the selected languages are, where each is fetched to, the splits.

    layout = Mc4Layout(cfg)
    files = layout.list_repository()          # prepare: every train file of the repository (path, size, sha256)
    layout.write_download_mapping(files)      # prepare: the selected files, and which download node fetches which
    layout.selected_files()                   # later steps: the files prepare selected (from the mapping)
    layout.splits()                           # per language, runs of files of at most max_split_size GB
    layout.split_prefix(split)                # <preprocessed_dir>/<lang>/<lang>_<nnn>_text_sentence

The repository is laid out as Hugging Face's allenai/c4:

    multilingual/c4-<lang>.tfrecord-<nnnnn>-of-<mmmmm>.json.gz             mC4, one language per file
    multilingual/c4-<lang>-validation.tfrecord-<nnnnn>-of-<mmmmm>.json.gz  (validation files: not used)
    en/c4-train.<nnnnn>-of-<mmmmm>.json.gz                                 the cleaned English C4

An http(s) repository is a git repository whose large files are git-lfs pointers: prepare clones it (bare,
shallow, no file contents) to list the files with their sizes and sha256, and each file is then fetched from
<mc4_repo_url>/resolve/main/<path> (resumable, verified). A file:// folder in the same layout is listed by walking
it and its files are copied. Every step derives the same lists from the same config and mapping files, so array
tasks agree on who does what without talking to each other.
"""

import json
import os
import re
from dataclasses import asdict, dataclass

from ..common.errors import DataPrepError
from ..steps.config import StepConfig
from ..steps.fetch import fetch
from ..steps.git_lfs_listing import list_files
from .pile_layout import dataset_level, fetch_policy

_MULTILINGUAL = re.compile(r"^multilingual/c4-(?P<lang>[A-Za-z]{2,3}(?:-[A-Za-z]+)?)\.tfrecord-\d+-of-\d+\.json\.gz$")
_CLEANED_ENGLISH = re.compile(r"^en/c4-train\.\d+-of-\d+\.json\.gz$")
_REVISION = "main"
_GB = 10**9


class Mc4Error(DataPrepError):
    """A repository, a mapping file or a download that does not match the config; the message says what to run."""


@dataclass(frozen=True)
class RepoFile:
    path: str  # relative to the repository root, e.g. multilingual/c4-de.tfrecord-00000-of-02048.json.gz
    language: str
    size: int  # bytes
    sha256: str | None = None  # from the git-lfs pointer; None for a local folder


@dataclass(frozen=True)
class Split:
    name: str  # <lang>_<nnn>
    language: str
    files: tuple[str, ...]  # repository paths, in name order
    size: int  # bytes of .json.gz


def language_of(path: str, cleaned_english: bool) -> str | None:
    """The language a repository file holds, or None when it is not a train file the config can select."""
    match = _MULTILINGUAL.match(path)
    if match:
        language = match.group("lang")
        if language.endswith("-validation") or language == "en" and cleaned_english:
            return None
        return language
    if cleaned_english and _CLEANED_ENGLISH.match(path):
        return "en"
    return None


class Mc4Layout:
    def __init__(self, cfg: StepConfig):
        self.cfg = cfg
        mc4 = cfg.bound  # the schema refused empty languages, a missing workers_per_node, a max_split_size <= 0
        self.repo_url = mc4.mc4_repo_url.rstrip("/")
        self.git_lfs_dir = mc4.git_lfs_dir
        self.cleaned_english = mc4.use_cleaned_english
        self.languages = mc4.language_list()
        self.nodes = mc4.run.node_array_size
        self.workers_per_node = mc4.run.workers_per_node
        self.max_split_bytes = max(1, int(mc4.max_split_size * _GB))
        self.preprocessed_dir = mc4.preprocessed_dir
        self.softlinks_dir = mc4.softlinks_dir
        self.level = dataset_level(cfg)
        self.json_key = mc4.json_key
        self.download_mapping = mc4.download_worker_mapping
        self.preprocess_mapping = mc4.preprocess_worker_mapping

    # ---- the repository ---------------------------------------------------------------------------------
    @property
    def remote(self) -> bool:
        return self.repo_url.startswith(("http://", "https://"))

    def local_root(self) -> str:
        return self.repo_url[len("file://") :] if self.repo_url.startswith("file://") else self.repo_url

    def url(self, path: str) -> str:
        if self.remote:
            return f"{self.repo_url}/resolve/{_REVISION}/{path}"
        return "file://" + os.path.join(os.path.abspath(self.local_root()), path)

    def local_path(self, item) -> str:
        """Where a repository file is downloaded to: <git_lfs_dir>/<path>, as git lfs pull would put it."""
        path = item.path if isinstance(item, RepoFile) else item
        return os.path.join(self.git_lfs_dir, path)

    def list_repository(self) -> list[RepoFile]:
        """Every train file of the repository that the language rules can select, sorted by path."""
        entries = self._list_git() if self.remote else self._list_folder()
        files = []
        for path, size, sha256 in entries:
            language = language_of(path, self.cleaned_english)
            if language is not None:
                files.append(RepoFile(path, language, size, sha256))
        return sorted(files, key=lambda item: item.path)

    def _list_folder(self) -> list[tuple[str, int, None]]:
        root = self.local_root()
        if not os.path.isdir(root):
            raise Mc4Error(f"data_preparation.mc4_repo_url={self.repo_url!r}: no such folder")
        entries = []
        for top in ("multilingual", "en"):
            folder = os.path.join(root, top)
            if os.path.isdir(folder):
                for name in os.listdir(folder):
                    path = os.path.join(folder, name)
                    if os.path.isfile(path):
                        entries.append((f"{top}/{name}", os.path.getsize(path), None))
        return entries

    def _list_git(self) -> list[tuple[str, int, str | None]]:
        return list_files(
            self.repo_url,
            os.path.join(self.git_lfs_dir, ".git"),
            keep=lambda path: language_of(path, self.cleaned_english) is not None,
            key="data_preparation.mc4_repo_url",
        )

    # ---- selection and download mapping -----------------------------------------------------------------
    def select(self, files: list[RepoFile]) -> list[RepoFile]:
        available = sorted({item.language for item in files})
        if self.languages == ["all"]:
            return list(files)
        unknown = [language for language in self.languages if language not in available]
        if unknown:
            raise Mc4Error(
                f"data_preparation.languages: {', '.join(unknown)} not in {self.repo_url} "
                f"(it has {', '.join(available) or 'no train files'})"
            )
        wanted = set(self.languages)
        return [item for item in files if item.language in wanted]

    def _settings(self) -> dict:
        """What a mapping file was made for; a step refuses a mapping made for other settings."""
        return {"repository": self.repo_url, "languages": self.languages, "use_cleaned_english": self.cleaned_english}

    def write_download_mapping(self, files: list[RepoFile]) -> dict[int, list[RepoFile]]:
        assignment = balance([(item, item.size, item.path) for item in files], self.nodes)
        _write_json(
            self.download_mapping,
            {
                "settings": self._settings(),
                "files": [asdict(item) for item in files],
                "nodes": {str(node): [item.path for item in items] for node, items in enumerate(assignment)},
            },
        )
        return dict(enumerate(assignment))

    def _read(self, path: str, step: str, key: str) -> dict:
        try:
            with open(path) as handle:
                values = json.load(handle)
        except FileNotFoundError:
            raise Mc4Error(f"{path} not found: run the {step} step first (data_preparation.{key})") from None
        except ValueError as error:
            raise Mc4Error(
                f"{path}: not a mapping this launcher wrote ({error}); delete it and run the {step} step"
            ) from None
        return values

    def _download_plan(self) -> dict:
        values = self._read(self.download_mapping, "prepare", "download_mc4=True")
        if values.get("settings") != self._settings():
            raise Mc4Error(
                f"{self.download_mapping} was written for {values.get('settings')}, not for this config "
                f"({self._settings()}); run the prepare step again (data_preparation.download_mc4=True)"
            )
        if len(values["nodes"]) != self.nodes:
            raise Mc4Error(
                f"{self.download_mapping} spreads the files over {len(values['nodes'])} nodes, the config "
                f"over run.node_array_size={self.nodes}; run the prepare step again"
            )
        return values

    def selected_files(self) -> list[RepoFile]:
        return [RepoFile(**item) for item in self._download_plan()["files"]]

    def node_files(self, node: int) -> list[RepoFile]:
        plan = self._download_plan()
        by_path = {item["path"]: RepoFile(**item) for item in plan["files"]}
        return [by_path[path] for path in plan["nodes"][str(node)]]

    # ---- splits and preprocess mapping ------------------------------------------------------------------
    def splits(self, files: list[RepoFile] | None = None) -> list[Split]:
        """Per language (sorted), its files in name order cut into runs of at most max_split_size GB; a file
        larger than that is a split of its own."""
        files = self.selected_files() if files is None else files
        by_language: dict[str, list[RepoFile]] = {}
        for item in sorted(files, key=lambda f: f.path):
            by_language.setdefault(item.language, []).append(item)
        splits = []
        for language in sorted(by_language):
            run: list[RepoFile] = []
            for item in by_language[language] + [None]:
                if run and (item is None or sum(f.size for f in run) + item.size > self.max_split_bytes):
                    splits.append(
                        Split(
                            f"{language}_{sum(s.language == language for s in splits):03d}",
                            language,
                            tuple(f.path for f in run),
                            sum(f.size for f in run),
                        )
                    )
                    run = []
                if item is not None:
                    run.append(item)
        return splits

    def split_prefix(self, split: Split) -> str:
        """<preprocessed_dir>/<lang>/<lang>_<nnn>_<json_key>_<level>: one folder per language, which the
        training side's automatic blend weighs as one component (data_blend.py)."""
        return os.path.join(self.preprocessed_dir, split.language, f"{split.name}_{self.json_key}_{self.level}")

    def split_links(self, split: Split) -> str:
        return os.path.join(self.softlinks_dir, split.language, split.name)

    def worker_count(self) -> int:
        return self.nodes * self.workers_per_node

    def write_preprocess_mapping(self, splits: list[Split]) -> list[list[Split]]:
        assignment = balance([(split, split.size, split.name) for split in splits], self.worker_count())
        _write_json(
            self.preprocess_mapping,
            {
                "settings": {**self._settings(), "max_split_bytes": self.max_split_bytes},
                "splits": [asdict(split) for split in splits],
                "workers": {str(worker): [split.name for split in items] for worker, items in enumerate(assignment)},
            },
        )
        return assignment

    def worker_splits(self, worker: int) -> list[Split]:
        values = self._read(self.preprocess_mapping, "setup_preprocess", "preprocess_data=True")
        expected = {**self._settings(), "max_split_bytes": self.max_split_bytes}
        if values.get("settings") != expected or len(values.get("workers", {})) != self.worker_count():
            raise Mc4Error(
                f"{self.preprocess_mapping} was written for other settings (languages, max_split_size, "
                f"run.node_array_size x run.workers_per_node); run the setup_preprocess step again"
            )
        splits = {
            item["name"]: Split(item["name"], item["language"], tuple(item["files"]), item["size"])
            for item in values["splits"]
        }
        return [splits[name] for name in values["workers"][str(worker)]]


def balance(items: list[tuple[object, int, str]], bins: int) -> list[list]:
    """Greedy by size: largest first (ties by name), each to the bin with the fewest bytes (ties: lowest)."""
    loads = [0] * bins
    assignment: list[list] = [[] for _ in range(bins)]
    for item, size, _ in sorted(items, key=lambda entry: (-entry[1], entry[2])):
        target = min(range(bins), key=lambda b: (loads[b], b))
        assignment[target].append(item)
        loads[target] += size
    return assignment


def _write_json(path: str, values: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as handle:
        json.dump(values, handle, indent=1)
    os.replace(temporary, path)


def ensure_tokenizer_files(cfg: StepConfig) -> None:
    """Fetch the SentencePiece model (download_tokenizer_url -> tokenizer_model) and its vocabulary
    (download_vocab_url -> <vocab_save_dir>/<model name>.vocab) when they are missing."""
    mc4 = cfg.bound
    model = mc4.tokenizer_model
    targets = [(mc4.download_tokenizer_url, model)]
    if mc4.vocab_save_dir:
        stem = os.path.basename(model)[: -len(".model")] if model.endswith(".model") else os.path.basename(model)
        targets.append((mc4.download_vocab_url, os.path.join(mc4.vocab_save_dir, stem + ".vocab")))
    for url, path in targets:
        if url and not os.path.isfile(path):
            fetch(url, path, policy=fetch_policy(cfg), resume=False)
