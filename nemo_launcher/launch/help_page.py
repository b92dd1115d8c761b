"""`python3 main.py --help`: the page is read off conf/, the stage and backend registries and the error classes,
so a new config file, stage, backend or exit code shows up without editing it. cli.py imports it on --help only.
"""

import ast
import os
import sys

import yaml

from .backends import BACKENDS
from .config_choices import configs_of, groups, primary_configs
from .errors import LauncherError
from .stages import STAGES

_HERE = os.path.dirname(os.path.abspath(__file__))


def print_help_page(conf_dir: str) -> None:
    try:
        sys.stdout.write(help_page(conf_dir))
        sys.stdout.flush()
    except BrokenPipeError:  # `--help | head` closed the pipe early: nothing is wrong, so no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def help_page(conf_dir: str) -> str:
    with open(os.path.join(conf_dir, "config.yaml")) as file:
        config = yaml.safe_load(file)
    defaults = {}
    for entry in config.get("defaults", []):
        if isinstance(entry, dict):
            defaults.update(entry)
    errors = sorted([LauncherError, *LauncherError.__subclasses__()], key=lambda error: error.exit_code)
    sections = [
        (
            "Usage: python3 main.py stages=[<stage>,...] <group>=<family>/<name> key=value ...\n\n"
            "Composes conf/config.yaml with the configs chosen below and the key=value overrides, checks every stage,\n"
            "then submits one job per stage in order (Slurm), writes them for Base Command Platform, "
            "or runs them here.\n"
            "Nothing is written or queued when a check fails. Example:",
            [("", "NEMO_LAUNCHER_DEBUG=1 python3 main.py stages=[training,conversion] training=gpt3/126m")],
        ),
        (
            f"Stages, in pipeline order (stages=[...], default [{','.join(config.get('stages') or [])}]):",
            [
                (stage, _summary(os.path.join(_HERE, "stages", f"{module}.py"), name).split(" stage: ", 1)[-1])
                for stage, (module, name) in STAGES.items()
            ],
        ),
        (
            "Configs of each stage (training=gpt3/5b reads conf/training/gpt3/5b.yaml; * marks the default;\n"
            "a stage without one needs <stage>=<family>/<name> when it runs):",
            [row for stage in STAGES for row in _choice_rows(conf_dir, stage, defaults.get(stage))],
        ),
        (
            "Other config groups (<group>=<name>):",
            [
                row
                for group in groups(conf_dir)
                if group not in STAGES
                for row in _choice_rows(conf_dir, group, defaults.get(group))
            ],
        ),
        (
            f"Cluster types (cluster_type=..., default {config.get('cluster_type')}):",
            [
                (name, _summary(os.path.join(_HERE, "backends", f"{module}.py")))
                for name, (module, _) in BACKENDS.items()
            ],
        ),
        (
            "Other top-level configs (--config-name=NAME in place of conf/config.yaml):",
            [("", ", ".join(name for name in primary_configs(conf_dir) if name != "config") or "(none)")],
        ),
        (
            "Hydra's options work as usual, among them:",
            [
                ("--cfg job", "print the composed config and exit"),
                ("-m", "sweep: training=gpt3/126m,gpt3/5b submits one pipeline per point"),
                ("--hydra-help", "Hydra's own help"),
            ],
        ),
        (
            "Environment:",
            [
                ("NEMO_LAUNCHER_DEBUG=1", "dry run: check, write the job directories, print the plan; submit nothing"),
                ("NEMO_LAUNCHER_FULL_ERROR=1", "show the full traceback of an error"),
            ],
        ),
        (
            "Exit status:",
            [("0", "done (a dry run too)")]
            + [(str(error.exit_code), error.__doc__.strip().split(". ")[0].rstrip(".")) for error in errors],
        ),
        (
            f"More: {os.path.join(os.path.dirname(conf_dir), 'docs', 'README.md')}. "
            "Before the first job on a new cluster:",
            [("", "python3 -m nemo_launcher.launch.preflight cluster.partition=... container=...")],
        ),
    ]
    return "\n\n".join(_section(title, rows) for title, rows in sections) + "\n"


def _section(title: str, rows: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in rows) + 2 if any(name for name, _ in rows) else 0
    return "\n".join([title, *(f"  {name.ljust(width)}{text}".rstrip() for name, text in rows)])


def _choice_rows(conf_dir: str, group: str, default: str | None) -> list[tuple[str, str]]:
    """One row per family, `training  gpt3: 126m, 175b, ...`; only the first names the group. The default's
    family comes first, the others alphabetically."""
    by_family: dict[str, list[str]] = {}
    for config in configs_of(conf_dir, group):
        family, _, name = config.rpartition("/")
        by_family.setdefault(family, []).append(name + "*" * (config == default))
    first = (default or "").rpartition("/")[0]
    order = sorted(by_family, key=lambda family: (family != first, family))
    texts = [f"{family}: " * bool(family) + ", ".join(by_family[family]) for family in order]
    return [("" if i else group, text) for i, text in enumerate(texts or ["(none)"])]


def _summary(module_path: str, class_name: str | None = None) -> str:
    """The first line of the docstring of `class_name` in a module (several stage kinds share one module), else of
    the module's, read without importing the module (or what it imports)."""
    with open(module_path) as file:
        tree = ast.parse(file.read())
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    docstring = (ast.get_docstring(classes[0]) if classes else None) or ast.get_docstring(tree) or ""
    return docstring.strip().split("\n", 1)[0]
