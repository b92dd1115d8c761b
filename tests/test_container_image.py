"""The job image (Dockerfile) installs exactly the project's requirement pins, from the requirements files.

The pins have one home, requirements-launch.txt, requirements-jobs.txt and requirements-nodeps.txt (installed with
--no-deps; requirements.txt gathers the first two); the Dockerfile copies those files and installs from them. Its
one exception, torch (the NGC base's CUDA build, which Transformer Engine and Apex are compiled against), is checked
here too: the file the image installs from is produced by running the Dockerfile's own shell commands on the real
requirement files.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
WORKDIR = "/opt/nemo-launcher"


def _instructions():
    """(instruction, argument text) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def _pins(path: Path, seen=None) -> dict:
    """name -> pinned version of a requirements file and the files it includes with -r."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins.update(_pins(path.parent / line[3:].strip()))
        elif line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned with =="
            pins[name.strip().lower()] = version.strip()
    return pins


def test_the_image_starts_from_an_ngc_pytorch_base():
    args = dict(a.split("=", 1) for kind, a in _instructions() if kind == "ARG" and "=" in a)
    (base,) = [a for kind, a in _instructions() if kind == "FROM"]
    assert base == "${BASE_IMAGE}" and args["BASE_IMAGE"].startswith("nvcr.io/nvidia/pytorch:")


def test_the_image_installs_exactly_the_projects_pins(tmp_path):
    steps = _instructions()
    copied = [a.split()[:-1] for kind, a in steps if kind == "COPY"][0]
    assert sorted(copied) == [
        "requirements-jobs.txt",
        "requirements-launch.txt",
        "requirements-nodeps.txt",
        "requirements.txt",
    ]
    (install,) = [a for kind, a in steps if kind == "RUN" and "pip install" in a]
    commands = [c.strip() for c in install.split("&&")]
    pip = [c for c in commands if c.startswith("pip install")]
    assert pip == [
        "pip install --no-cache-dir -c /tmp/base-constraints.txt -r /tmp/job-requirements.txt",
        "pip install --no-cache-dir --no-deps -r requirements-nodeps.txt",
    ], "packages come only from the requirement files, never named in the Dockerfile"
    # Run the Dockerfile's own file edits on the real files, in a copy of the image's WORKDIR.
    workdir, scratch = tmp_path / "opt", tmp_path / "tmp"
    workdir.mkdir(), scratch.mkdir()
    for name in copied:
        (workdir / name).write_text((ROOT / name).read_text())
    edits = [c for c in commands if c.startswith(("grep ", "sed "))]
    script = " && ".join(edits).replace("/tmp/", f"{scratch}/").replace(WORKDIR, str(workdir))
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workdir, check=True)
    installed = _pins(scratch / "job-requirements.txt")
    project = _pins(ROOT / "requirements.txt")
    assert set(project) - set(installed) == {"torch"}, "only torch is left to the NGC base image"
    assert installed == {name: version for name, version in project.items() if name != "torch"}


def test_no_transformer_engine_or_unpinned_install():
    text = DOCKERFILE.read_text()
    assert not re.search(r"pip install[^\n]*transformer[-_]engine", text), (
        "Transformer Engine comes with the base image"
    )
    ignored = (ROOT / ".dockerignore").read_text().split()
    for kind, args in _instructions():
        if kind == "COPY":
            for source in args.split()[:-1]:
                assert f"!{source}" in ignored, f".dockerignore leaves {source} out of the build context"
