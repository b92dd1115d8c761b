"""The command line before Hydra: our --help page, config-name typos answered with the nearest choices, and a dry
run that needs nothing beyond requirements-launch.txt."""

import json
import os
import re
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from nemo_launcher.launch.backends import BACKENDS
from nemo_launcher.launch.cli import CONF_DIR, check_command_line, command_line_problem, read_command_line
from nemo_launcher.launch.resolvers import REPO_ROOT
from nemo_launcher.launch.stages import STAGES


def _main(args, **env):
    environ = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "main.py", *args], cwd=REPO_ROOT, env=environ, capture_output=True, text=True
    )


def _rows(page, title):
    """{name: text} of the page's section whose title starts with `title`; continuation lines join their row."""
    section = page.split("\n" + title, 1)[1].split("\n\n", 1)[0].splitlines()
    rows, name = {}, None
    for line in (line for line in section if line.startswith("  ")):  # rows are indented; the title is not
        if not line.startswith("   "):
            name, _, line = line.strip().partition(" ")
        rows[name] = (rows.get(name, "") + " " + line.strip()).strip()
    return rows


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_page_lists_every_choice(flag):
    result = _main([flag])
    assert result.returncode == 0 and result.stderr == ""
    page = result.stdout
    assert page.startswith("Usage: python3 main.py stages=[")
    assert list(_rows(page, "Stages, in pipeline order")) == list(STAGES)
    configs = {**_rows(page, "Configs of each stage"), **_rows(page, "Other config groups")}
    for group in [*STAGES, "cluster", "env_preset"]:
        for path in sorted((Path(CONF_DIR) / group).rglob("*.yaml")):
            family = path.parent.relative_to(Path(CONF_DIR) / group).as_posix()
            assert re.search(rf"(^|\s){re.escape(path.stem)}\*?(,|$| )", configs[group]), (group, path)
            assert family == "." or f"{family}:" in configs[group], (group, family)
    assert configs["training"].startswith("gpt3: 126m, 175b, 175b_16k, 175b_32k, 175b_fp8, 1b_improved, ")
    cluster_types = _rows(page, "Cluster types")
    assert list(cluster_types) == list(BACKENDS) and "Slurm" in cluster_types["bcm"]
    assert "quickstart" in page and "NEMO_LAUNCHER_DEBUG=1" in page and "NEMO_LAUNCHER_FULL_ERROR=1" in page
    assert "README.md" in page
    assert "_family" not in page and "hydra/" not in page


def test_hydra_help_is_still_hydras():
    result = _main(["--hydra-help"])
    assert result.returncode == 0
    assert "== Flags ==" in result.stdout and "Usage: python3 main.py" not in result.stdout


@pytest.mark.parametrize(
    "args, key, nearest",
    [
        (["training=gpt3/5bb"], "training='gpt3/5bb'", "nearest: gpt3/5b"),
        (["conversion=gpt3/convert_gpt"], "conversion='gpt3/convert_gpt'", "nearest: gpt3/convert_gpt3"),
        (["+training=gpt3/5bb"], "+training='gpt3/5bb'", "nearest: gpt3/5b"),
        (["-m", "stages=[training]", "training=gpt3/126m,gpt3/5bb"], "training='gpt3/5bb'", "nearest: gpt3/5b"),
        (["env_preset=awz"], "env_preset='awz'", "nearest: aws"),
        (["--config-name=quickstrat"], "--config-name='quickstrat'", "nearest: quickstart"),
        (["--config-name", "quickstrat"], "--config-name='quickstrat'", "nearest: quickstart"),
        (["-cn", "quickstrat"], "--config-name='quickstrat'", "nearest: quickstart"),
        (["trainin=gpt3/5b"], "trainin='gpt3/5b'", "no such config group; nearest: training"),
    ],
)
def test_missing_config_exits_2_naming_the_nearest(tmp_path, args, key, nearest):
    results = tmp_path / "results"
    result = _main([*args, f"base_results_dir={results}"], NEMO_LAUNCHER_DEBUG="1")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"Error: {key}: no such config")
    assert nearest in result.stderr and "python3 main.py --help" in result.stderr
    assert not results.exists()


def test_good_choices_pass_through_to_hydra(tmp_path):
    results = tmp_path / "results"
    result = _main(
        [
            "stages=[training,conversion]",
            "training=gpt3/126m",
            "conversion=gpt3/convert_gpt3.yaml",
            "env_preset=aws",
            "cluster_type=bcm",
            "training.trainer.num_nodes=2",
            "+env_vars.MY_FLAG=1",
            f"base_results_dir={results}",
        ],
        NEMO_LAUNCHER_DEBUG="1",
    )
    assert result.returncode == 0, result.stderr
    assert (results / "gpt3_126m" / "nemo-megatron-gpt3_126m_submission.sh").exists()
    composed = _main(["--cfg", "job", "-cn", "quickstart"])
    assert composed.returncode == 0, composed.stderr
    assert "cluster_type: interactive" in composed.stdout


def test_command_line_is_read_the_way_argparse_reads_it():
    options, overrides = read_command_line(
        ["-m", "--cfg", "job", "-cn=quickstart", "--info", "training=gpt3/5b", "-p", "training", "a=1", "--", "-b=2"]
    )
    assert options == {
        "--multirun": None,
        "--cfg": "job",
        "--config-name": "quickstart",
        "--info": None,
        "--package": "training",
    }
    assert overrides == ["training=gpt3/5b", "a=1", "-b=2"]
    options, overrides = read_command_line(["--info", "defaults", "x=1"])
    assert options == {"--info": "defaults"} and overrides == ["x=1"]


@pytest.mark.parametrize(
    "override",
    [
        "training=null",
        "training=gpt3/126m,null",
        "training.model.num_layers=3",
        "cluster_type=bcp",
        "base_results_dir=/tmp/x",
        "stages=[trainin]",
        "+trainin=gpt3/5b",
        "~fine_tuning",
        "hydra/launcher=basicx",
        "hydra.run.dir=/tmp",
        "training=choice(gpt3/5bb)",
        "training=${oc.env:X}",
        "completely_unknown_key=1",
    ],
)
def test_what_hydra_judges_is_left_to_hydra(override):
    assert command_line_problem(None, [override]) is None


def test_other_config_sources_are_left_to_hydra(capsys):
    for args in (
        ["-cp", "/elsewhere", "training=gpt3/5bb"],
        ["--config-dir=/more", "training=gpt3/5bb"],
        ["training=gpt3/5bb", "hydra.searchpath=[file:///more]"],
        ["--hydra-help", "training=gpt3/5bb"],
    ):
        check_command_line(["main.py", *args])  # returns: Hydra reads the configs from where it is told
    assert capsys.readouterr() == ("", "")
    with pytest.raises(SystemExit) as stopped:
        check_command_line(["main.py", "training=gpt3/5bb"])
    assert stopped.value.code == 2


def _launch_distributions():
    """Distributions named in requirements-launch.txt and everything they require, by their own metadata."""
    names = [
        Requirement(line).name
        for line in (Path(REPO_ROOT) / "requirements-launch.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-"))
    ]
    assert {"hydra-core", "omegaconf", "pyyaml"} <= {_normal(name) for name in names}
    allowed, todo = set(), list(names)
    while todo:
        name = _normal(todo.pop())
        if name in allowed:
            continue
        allowed.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    # The project itself, where pip has installed or built it (a dist-info, or the nemo_launcher.egg-info that
    # building from the checkout leaves there): its package is the launcher, not a stray.
    allowed.add("nemo-launcher")
    return allowed


def _normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()


# Runs main.py in this interpreter as on a login node that has only requirements-launch.txt installed: the
# top-level modules of every other distribution fail to import (argv[1] lists them), so an optional import
# (omegaconf tries `attr`) falls back as it would there, and a needed one fails the run. At exit it prints the
# file of each top-level module imported after start-up.
_IMPORT_PROBE = """
import atexit, json, runpy, sys
blocked = set(json.loads(sys.argv[1]))
class NotOnLoginNodes:
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in blocked:
            raise ModuleNotFoundError(f'No module named {name!r} (not in requirements-launch.txt)', name=name)
sys.meta_path.insert(0, NotOnLoginNodes())
before = set(sys.modules)
def report():
    files = {}
    for top in {name.partition('.')[0] for name in list(sys.modules)} - before:
        module = sys.modules.get(top)
        files[top] = getattr(module, '__file__', None) or next(iter(getattr(module, '__path__', None) or []), None)
    print('IMPORTED', json.dumps(files))
atexit.register(report)
sys.argv = ['main.py', *sys.argv[2:]]
runpy.run_path('main.py', run_name='__main__')
"""


@pytest.mark.parametrize(
    "args",
    [
        [
            "stages=[data_preparation,training,conversion,fine_tuning,peft,evaluation,export]",
            "fine_tuning=gpt3/squad",
            "fine_tuning.model.tensor_model_parallel_size=2",  # 5B tuned whole on TP 1 does not fit an 80 GB GPU
            "peft=gpt3/squad",
        ],
        ["stages=[training]", "cluster_type=bcp"],
        ["stages=[training]", "training=gpt3/tiny", "cluster_type=interactive"],
    ],
)
def test_dry_run_needs_only_launch_requirements(tmp_path, args):
    owners = metadata.packages_distributions()
    allowed = _launch_distributions()
    blocked = sorted(
        top
        for top, dists in owners.items()
        if top not in sys.stdlib_module_names and not {_normal(d) for d in dists} & allowed
    )
    assert "torch" in blocked and "hydra" not in blocked  # the job side is installed here, and is shut out
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, json.dumps(blocked), *args, f"base_results_dir={tmp_path}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, NEMO_LAUNCHER_DEBUG="1"),
    )
    assert result.returncode == 0, result.stderr
    assert "Pipeline, dry run" in result.stdout
    imported = json.loads(result.stdout.rsplit("IMPORTED ", 1)[1])
    site_dirs = [os.path.realpath(path) for path in [*site.getsitepackages(), site.getusersitepackages()]]
    from_site = sorted(
        top
        for top, where in imported.items()
        if where and any(os.path.realpath(where).startswith(path + os.sep) for path in site_dirs)
    )
    assert "hydra" in from_site and "yaml" in from_site  # the probe sees what the launcher imports
    strays = {top: owners.get(top) for top in from_site if not {_normal(d) for d in owners.get(top, [])} & allowed}
    assert not strays, f"imported from outside requirements-launch.txt: {strays}"
    assert "difflib" not in imported  # loaded only once a typo is found
