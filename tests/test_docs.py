"""The docs as a reader meets them: every relative link resolves, every command they print names configs, stages,
files and modules that exist, and each `python3 main.py ...` command dry-runs clean in-process.

    python3 -m pytest -q tests/test_docs.py

What is checked, in README.md and docs/**/*.md:
- links: every relative Markdown link points to a file (or folder) of the repository, and a `#anchor` to a heading
  of the target page, spelled as GitHub spells heading anchors;
- commands (```bash blocks and inline `python3 main.py ...`): the command is split as the shell would; for main.py
  the launcher's own command-line check runs (config names, config groups), every stage of `stages=[...]` must be a
  stage kind, then the command is composed with Hydra's compose API and dry-run by the launcher in-process (as
  NEMO_LAUNCHER_DEBUG=1 would, results under a temporary folder, input check off), so its overrides are proven to
  bind to the job schemas; `python3 -m nemo_launcher <command>` and `nemo-launcher <command>` must name one of the
  console's subcommands, `python3 -m <module>` a module of this repository, `python3 <file>`/`bash <file>`/
  `pip install -r <file>` a file;
- inline mentions: every `group=choice` (brace lists and globs expanded) names a config under conf/<group>/, every
  repository path (`conf/...`, `tests/...`, `benchmarks/...`, `jobs/...`, `contract/...`, `launch/...`, ...) and every
  `nemo_launcher.x.y` module exists, so a moved module or a renamed config shows up here;
- the README stays under README_LIMIT characters.
"""

import fnmatch
import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nemo_launcher.launch.app import run
from nemo_launcher.launch.cli import check_command_line, command_line_problem, read_command_line
from nemo_launcher.launch.resolvers import REPO_ROOT
from nemo_launcher.launch.stages import STAGES

from .launch.conftest import compose_config

README_LIMIT = 15_000
CONF = REPO_ROOT / "conf"
DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
# Commands the docs print that cannot run as printed, each with the reason (keyed by the command's words after
# `python3 main.py`, joined by one space). Keep it short: a command a user can copy should be checked.
UNCHECKED_COMMANDS = {
    "--help": "prints the help page and exits before Hydra; test_main_help_command_runs runs it",
}
# Mistakes the docs show on purpose, to say how the launcher refuses them; test_shown_mistakes_are_refused
# proves each is still a mistake.
SHOWN_MISTAKES = {"training=gpt3/5bb", "--config-name=quickstrat"}
# Folders of the repository whose inline paths are checked; `jobs/`, `contract/` and `launch/` are read under
# nemo_launcher/, as the docs abbreviate them.
PATH_ROOTS = (
    "conf/",
    "tests/",
    "benchmarks/",
    ".ci/",
    "csp_tools/",
    "deployment/",
    "corpora/",
    "docs/",
    "nemo_launcher/",
    "main.py",
    "Dockerfile",
    "requirements",
)
PACKAGE_ROOTS = ("jobs/", "contract/", "launch/")

_FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", re.S | re.M)  # also indented, in a list item
_INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def _doc_id(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: markup dropped, lower case, punctuation dropped, spaces to dashes."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set:
    seen: dict = {}
    anchors = set()
    for match in _HEADING.finditer(_prose(path.read_text())):
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _expand_braces(text: str) -> list:
    """`a/{b,c}_{1,2}` -> a/b_1, a/b_2, a/c_1, a/c_2 (as bash expands braces)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", text)
    if match is None:
        return [text]
    return [
        expanded
        for choice in match.group(1).split(",")
        for expanded in _expand_braces(text[: match.start()] + choice + text[match.end() :])
    ]


def _exists(relative: str) -> bool:
    """A repository path, a glob of one, exists."""
    if any(char in relative for char in "*?["):
        return any(REPO_ROOT.glob(relative))
    return (REPO_ROOT / relative).exists()


def _config_exists(group: str, choice: str) -> bool:
    if any(char in choice for char in "*?["):
        return any(
            fnmatch.fnmatch(str(p.relative_to(CONF / group).with_suffix("")), choice)
            for p in (CONF / group).rglob("*.yaml")
        )
    return (CONF / group / f"{choice}.yaml").is_file()


# ---- links --------------------------------------------------------------------------------------------------------


def _broken_links(doc: Path) -> list:
    broken = []
    for target in _LINK.findall(_INLINE.sub("", _prose(doc.read_text()))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not this repository's
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {_doc_id(path)}")
    return broken


@pytest.mark.parametrize("doc", DOC_FILES, ids=_doc_id)
def test_relative_links_resolve(doc):
    broken = _broken_links(doc)
    assert not broken, f"{_doc_id(doc)}: broken links:\n" + "\n".join(broken)


def test_docs_folder_is_indexed_and_linked():
    """Every page under docs/ is reachable: docs/README.md links each, and the README links docs/README.md."""
    index = REPO_ROOT / "docs" / "README.md"
    assert index.is_file(), "docs/README.md (the index of docs/) is missing"
    linked = {(index.parent / target.partition("#")[0]).resolve() for target in _LINK.findall(index.read_text())}
    unlinked = [_doc_id(page) for page in DOC_FILES[1:] if page != index and page.resolve() not in linked]
    assert not unlinked, f"docs/README.md does not link: {unlinked}"
    assert "docs/README.md" in (REPO_ROOT / "README.md").read_text()


def test_readme_is_short():
    size = len((REPO_ROOT / "README.md").read_text())
    assert size < README_LIMIT, f"README.md has {size} characters (limit {README_LIMIT}): move manual text to docs/"


# ---- commands -----------------------------------------------------------------------------------------------------


def _bash_commands(text: str):
    """The commands of ```bash blocks, one word list each: line continuations joined, comments and leading
    VAR=value assignments dropped."""
    for match in _FENCE.finditer(text):
        if match.group(1) not in ("bash", "sh", "shell"):
            continue
        for line in match.group(2).replace("\\\n", " ").splitlines():
            if line.strip().startswith("#") or not line.strip():
                continue
            for command in re.split(r"\s(?:&&|\|\||;)\s", line):
                yield shlex.split(command, comments=True)


def _inline_main_commands(text: str):
    for span in _INLINE.findall(_prose(text)):
        span = " ".join(span.split())
        if span.startswith(("python3 main.py ", "NEMO_LAUNCHER_DEBUG=1 python3 main.py ")):
            yield shlex.split(span)


def _without_env(words: list) -> list:
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    return words


def _main_commands() -> list:
    """(doc, main.py's arguments) for every main.py command the docs print, in order, each once (a command printed
    on several pages is dry-run for the first)."""
    commands = []
    for doc in DOC_FILES:
        text = doc.read_text()
        for words in [*_bash_commands(text), *_inline_main_commands(text)]:
            words = _without_env(words)
            if words[:2] == ["python3", "main.py"] and words[2:] not in [args for _, args in commands]:
                commands.append((_doc_id(doc), words[2:]))
    return commands


MAIN_COMMANDS = [(doc, args) for doc, args in _main_commands() if " ".join(args) not in UNCHECKED_COMMANDS]


def test_unchecked_commands_are_still_in_the_docs():
    printed = {" ".join(args) for _, args in _main_commands()}
    assert not set(UNCHECKED_COMMANDS) - printed, "UNCHECKED_COMMANDS lists a command the docs no longer print"


def test_shown_mistakes_are_refused():
    for mistake in SHOWN_MISTAKES:
        options, overrides = read_command_line([mistake])
        assert command_line_problem(options.get("--config-name"), overrides) is not None, mistake


def _sweep_points(overrides: list) -> list:
    """For `-m`: the overrides of the first and of the last point of each plain comma sweep."""
    sweeps = [i for i, o in enumerate(overrides) if "," in o.partition("=")[2] and "[" not in o]
    if not sweeps:
        return [overrides]
    points = []
    for pick in (0, -1):
        point = list(overrides)
        for i in sweeps:
            key, _, values = point[i].partition("=")
            point[i] = f"{key}={values.split(',')[pick]}"
        points.append(point)
    return points


@pytest.mark.parametrize("doc,args", MAIN_COMMANDS, ids=[f"{d}:{' '.join(a)}"[:120] for d, a in MAIN_COMMANDS])
def test_main_command_dry_runs(doc, args, tmp_path, monkeypatch, capsys):
    printed = " ".join(args)
    options, overrides = read_command_line(args)
    problem = command_line_problem(options.get("--config-name"), overrides)
    assert problem is None, f"{doc}: python3 main.py {printed}\n  {problem}"
    config_name = options.get("--config-name") or "config"
    monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", "1")
    for point in _sweep_points(overrides) if "--multirun" in options else [overrides]:
        argv = ["main.py", f"base_results_dir={tmp_path / 'results'}", *point]
        try:
            cfg, choices = compose_config(argv[1:], config_name)
        except Exception as error:  # Hydra's composition errors: a key the config lacks, a bad override
            pytest.fail(f"{doc}: python3 main.py {' '.join(point)} does not compose: {error}", pytrace=False)
        unknown = [stage for stage in cfg.stages if stage not in STAGES or not (CONF / stage).is_dir()]
        assert not unknown, f"{doc}: python3 main.py {printed}: no such stage {unknown}; stages are {sorted(STAGES)}"
        for override in point:
            group, _, choice = override.partition("=")
            if (CONF / group).is_dir() and "," not in choice:
                assert choices.get(group) == choice, f"{doc}: {override} did not select conf/{group}/{choice}.yaml"
            elif "." in group and not group.startswith(("+", "~")) and "[" not in group:
                assert OmegaConf.select(cfg, group, default=None) is not None or choice == "null", (
                    f"{doc}: {override}: the composed config has no {group}"
                )
        code = run(cfg, choices, argv)
        captured = capsys.readouterr()
        assert code == 0, (
            f"{doc}: NEMO_LAUNCHER_DEBUG=1 python3 main.py {' '.join(point)} exits {code}:\n{captured.err}"
        )


def test_main_help_command_runs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        check_command_line(["main.py", "--help"])
    assert exit_info.value.code == 0
    assert "quickstart" in capsys.readouterr().out


@pytest.fixture(scope="module")
def console_commands() -> set:
    """The subcommands `python3 -m nemo_launcher --help` lists (its usage line: `{status,logs,cancel}`)."""
    usage = subprocess.run(
        [sys.executable, "-m", "nemo_launcher", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(re.search(r"\{([\w,-]+)\}", usage).group(1).split(","))


def _module_exists(dotted: str) -> bool:
    base = REPO_ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _module_defines(dotted: str, name: str) -> bool:
    """`nemo_launcher.launch.app.run`: a function or class of a module of this repository."""
    base = REPO_ROOT.joinpath(*dotted.split("."))
    source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    return source.is_file() and re.search(rf"^(def|class) {name}\b", source.read_text(), re.M) is not None


def _other_command_problems(words: list, console: set) -> list:
    """What is wrong with a command that is not main.py's: unknown subcommand, module or file."""
    words = _without_env(words)
    if not words:
        return []
    if words[0] == "nemo-launcher" or words[:3] == ["python3", "-m", "nemo_launcher"]:
        rest = words[1:] if words[0] == "nemo-launcher" else words[3:]
        command = next((w for w in rest if not w.startswith("-")), None)
        return [] if command in console or rest in ([], ["--help"]) else [f"no console command {command!r}"]
    if words[:2] == ["python3", "-m"] and words[2].startswith("nemo_launcher"):
        return [] if _module_exists(words[2]) else [f"no module {words[2]}"]
    if words[:3] == ["python3", "-m", "pytest"]:
        paths = [w.split("::")[0] for w in words[3:] if not w.startswith("-") and "/" in w]
        return [f"no such path {p}" for p in paths if not _exists(p)]
    if words[0] in ("python3", "bash") and len(words) > 1 and not words[1].startswith("-"):
        return [] if _exists(words[1]) else [f"no such file {words[1]}"]
    if words[:2] == ["pip", "install"] and "-r" in words:
        requirement = words[words.index("-r") + 1]
        return [] if _exists(requirement) else [f"no such file {requirement}"]
    return []


@pytest.mark.parametrize("doc", DOC_FILES, ids=_doc_id)
def test_other_commands_name_what_exists(doc, console_commands):
    problems = [
        f"{' '.join(words)}: {problem}"
        for words in _bash_commands(doc.read_text())
        for problem in _other_command_problems(words, console_commands)
    ]
    assert not problems, f"{_doc_id(doc)}:\n" + "\n".join(problems)


# ---- inline mentions ----------------------------------------------------------------------------------------------


def _mention_problems(span: str) -> list:
    problems = []
    for word in re.sub(r",\s+", ",", span).split():  # a brace list may break across lines
        word = word.strip(",;:()")
        if "<" in word or "..." in word or "$" in word or word in SHOWN_MISTAKES:
            continue  # a placeholder the reader fills in, or a mistake shown on purpose
        key, has_value, value = word.lstrip("+").partition("=")
        if has_value and key == "stages" and value.startswith("["):
            unknown = [s for s in value.strip("[]").split(",") if s and s not in STAGES]
            problems += [f"{word}: no stage {s!r}" for s in unknown]
        elif has_value and re.fullmatch(r"[a-z_]+", key) and (CONF / key).is_dir() and value:
            for expanded in _expand_braces(value):
                for choice in re.split(r"[,|]", expanded):
                    if choice and choice != "null" and not _config_exists(key, choice):
                        problems.append(f"{word}: no conf/{key}/{choice}.yaml")
        elif not has_value and word.startswith(PATH_ROOTS + PACKAGE_ROOTS):
            for path in _expand_braces(word.split("::")[0].split(":")[0]):
                relative = f"nemo_launcher/{path}" if path.startswith(PACKAGE_ROOTS) else path
                if not _exists(relative.rstrip("/")):
                    problems.append(f"{word}: no such path {relative}")
        elif not has_value and re.fullmatch(r"nemo_launcher(\.[\w{},]+)+", word):
            for dotted in _expand_braces(word):
                if not _module_exists(dotted) and not _module_defines(*dotted.rsplit(".", 1)):
                    problems.append(f"{word}: no module {dotted}")
    return problems


@pytest.mark.parametrize("doc", DOC_FILES, ids=_doc_id)
def test_inline_mentions_name_what_exists(doc):
    problems = [
        problem
        for span in _INLINE.findall(_prose(doc.read_text()))
        for problem in _mention_problems(" ".join(span.split()))
    ]
    assert not problems, f"{_doc_id(doc)}: mentions of things that do not exist:\n" + "\n".join(problems)


def test_every_quick_start_is_in_the_readme():
    readme = (REPO_ROOT / "README.md").read_text()
    missing = [
        p.stem
        for p in sorted(CONF.glob("quickstart*.yaml"))
        if not re.search(rf"--config-name={p.stem}(?![\w-])", readme)
    ]
    assert not missing, f"README.md's quick-start table lacks {missing}"


def test_the_checks_find_what_they_look_for():
    """The parsers above on known text, so that a check cannot pass by finding nothing."""
    text = (
        "```bash\nNEMO_LAUNCHER_DEBUG=1 python3 main.py stages=[training] \\\n    training=gpt3/126m  # dry\n"
        "python3 -m nemo_launcher status RUN && bash .ci/run\n```\n- item\n\n  ```bash\n  bash .ci/x\n  ```\n"
        "See [x](docs/README.md#no-such) and "
        "`python3 main.py --config-name=quickstart_t5`.\n"
    )
    assert list(_bash_commands(text)) == [
        ["NEMO_LAUNCHER_DEBUG=1", "python3", "main.py", "stages=[training]", "training=gpt3/126m"],
        ["python3", "-m", "nemo_launcher", "status", "RUN"],
        ["bash", ".ci/run"],
        ["bash", ".ci/x"],
    ]
    assert list(_inline_main_commands(text)) == [["python3", "main.py", "--config-name=quickstart_t5"]]
    assert _LINK.findall(_prose(text)) == ["docs/README.md#no-such"]
    assert _slug("Jobs under faults: `scancel`, requeue") == "jobs-under-faults-scancel-requeue"
    assert _expand_braces("gpt3/{5b,40b}_{16k,32k}") == ["gpt3/5b_16k", "gpt3/5b_32k", "gpt3/40b_16k", "gpt3/40b_32k"]
    assert _mention_problems("training=gpt3/5bc") == ["training=gpt3/5bc: no conf/training/gpt3/5bc.yaml"]
    assert _mention_problems("training=gpt3/{5b,\n 126m}") == []
    assert _mention_problems("nemo_launcher.launch.app.run nemo_launcher.launch.app.runs") == [
        "nemo_launcher.launch.app.runs: no module nemo_launcher.launch.app.runs"
    ]
    assert _mention_problems("training=gpt3/{5b,126m} stages=[training,conversion]") == []
    assert _mention_problems("stages=[trainig]") == ["stages=[trainig]: no stage 'trainig'"]
    assert _mention_problems("jobs/gpt/no_such.py") == [
        "jobs/gpt/no_such.py: no such path nemo_launcher/jobs/gpt/no_such.py"
    ]
    assert _mention_problems("nemo_launcher.launch.{cli,no_such}") == [
        "nemo_launcher.launch.{cli,no_such}: no module nemo_launcher.launch.no_such"
    ]
    assert _sweep_points(["training=gpt3/126m", "training.model.micro_batch_size=1,2"]) == [
        ["training=gpt3/126m", "training.model.micro_batch_size=1"],
        ["training=gpt3/126m", "training.model.micro_batch_size=2"],
    ]
    assert list(
        itertools.chain(
            _other_command_problems(["python3", "-m", "nemo_launcher", "stat"], {"status"}),
            _other_command_problems(["bash", ".ci/no_such"], set()),
        )
    ) == ["no console command 'stat'", "no such file .ci/no_such"]


def _table_codes(page: str, heading: str) -> set:
    """The codes of the first column of the table under `heading` in docs/<page>."""
    section = (REPO_ROOT / "docs" / page).read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if re.match(r"\|\s*\d", line)]
    return {int(code) for row in rows for code in row.split(",")}


def test_exit_code_tables_match_the_code():
    from nemo_launcher import contract
    from nemo_launcher.launch import errors
    from nemo_launcher.launch.interrupts import SIGNALS

    def subclasses(cls):
        return {cls, *(sub for direct in cls.__subclasses__() for sub in subclasses(direct))}

    stopped = {128 + number for number in SIGNALS}  # a stage run here stopped by one of the handled signals
    launcher = {0} | stopped | {error.exit_code for error in subclasses(errors.LauncherError)}
    assert _table_codes("exit-codes.md", "## The launcher") == launcher
    jobs = {0, 1, 2, contract.RUN_DIRECTORY_IN_USE_EXIT_CODE, contract.STORAGE_FAULT_EXIT_CODE}
    assert _table_codes("exit-codes.md", "## The jobs") == jobs
