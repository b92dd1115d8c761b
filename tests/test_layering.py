"""The job side layers one way, and the launch side stays torch-free: read from the sources, no import runs.

    python3 -m pytest -q tests/test_layering.py

Every module under nemo_launcher/ is parsed with `ast`; every import counts, the ones inside functions and the
relative ones too, since an import deferred to a function is still a dependency. The layers are the table
`LAYERS` (and `SAME_LAYER_IMPORTS`) in nemo_launcher/jobs/__init__.py, read here as literals.
"""

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "nemo_launcher"
JOBS = PACKAGE / "jobs"
HEAVY = ("torch", "megatron", "lightning", "pytorch_lightning", "nemo_launcher.jobs")


def _module_name(path: Path) -> tuple[str, bool]:
    """(dotted name, is a package __init__) of a file under the repository."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, wherever it is written; `from a import b` yields
    both `a` and `a.b` (b may be a module)."""
    name, is_package = _module_name(path)
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def _literal(name: str):
    """A module-level literal assigned in nemo_launcher/jobs/__init__.py."""
    tree = ast.parse((JOBS / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"nemo_launcher/jobs/__init__.py assigns no literal {name}")


def _job_package(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["nemo_launcher", "jobs"] else ""


def package_imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> 'file:line imports module' for every import between two packages
    of nemo_launcher/jobs."""
    edges = defaultdict(list)
    for path in sorted(JOBS.rglob("*.py")):
        source = _job_package(_module_name(path)[0])
        seen = set()
        for line, module in imports_of(path):
            target = _job_package(module)
            if source and target and target != source and (line, target) not in seen:
                seen.add((line, target))  # one entry per import statement, not per imported name
                edges[(source, target)].append(f"{path.relative_to(REPO)}:{line} imports {module}")
    return edges


def job_packages() -> list[str]:
    return sorted(p.name for p in JOBS.iterdir() if (p / "__init__.py").is_file())


def test_every_job_package_has_a_layer():
    layers = _literal("LAYERS")
    missing = [name for name in job_packages() if name not in layers]
    assert not missing, f"job packages without a layer: {missing}; add each to LAYERS in nemo_launcher/jobs/__init__.py"
    stale = sorted(set(layers) - set(job_packages()))
    assert not stale, f"LAYERS in nemo_launcher/jobs/__init__.py names packages that do not exist: {stale}"


def test_job_packages_import_only_lower_layers():
    layers = _literal("LAYERS")
    allowed = _literal("SAME_LAYER_IMPORTS")
    wrong = []
    for (source, target), places in sorted(package_imports().items()):
        upward = layers.get(target, 99) > layers.get(source, -1)
        sideways = layers.get(target) == layers.get(source) and (source, target) not in allowed
        if upward or sideways:
            kind = "a higher layer" if upward else "its own layer (not in SAME_LAYER_IMPORTS)"
            wrong += [
                f"{place}: {source} (layer {layers.get(source)}) imports {target} (layer {layers.get(target)}), {kind}"
                for place in places
            ]
    assert not wrong, "imports against the layering of nemo_launcher/jobs:\n" + "\n".join(wrong)


def test_no_package_cycle():
    graph = defaultdict(set)
    for source, target in package_imports():
        graph[source].add(target)
    edges = package_imports()
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                cycles.append(
                    " -> ".join(cycle) + "\n" + "\n".join(f"    {edges[(a, b)][0]}" for a, b in zip(cycle, cycle[1:]))
                )
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "package cycles in nemo_launcher/jobs:\n" + "\n".join(cycles)


def _launch_side_files() -> list[Path]:
    files = [REPO / "main.py", PACKAGE / "__init__.py", PACKAGE / "__main__.py"]
    for sub in ("launch", "contract"):
        files += sorted((PACKAGE / sub).rglob("*.py"))
    return [f for f in files if f.is_file()]


def test_launch_side_and_contract_import_no_torch_and_no_job_module():
    wrong = []
    for path in _launch_side_files():
        for line, module in imports_of(path):
            if any(module == heavy or module.startswith(heavy + ".") for heavy in HEAVY):
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert not wrong, (
        "the launch side and the contract must stay torch-free and never import the job side:\n"
        + "\n".join(sorted(set(wrong)))
    )


def test_the_checks_see_imports_inside_functions(tmp_path, monkeypatch):
    """The parser counts a deferred relative import: without that the cycles above hide."""
    fake = tmp_path / "nemo_launcher" / "jobs" / "core"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "lora.py").write_text("def f():\n    from ..gpt import lora_file\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert list(imports_of(fake / "lora.py")) == [
        (2, "nemo_launcher.jobs.gpt"),
        (2, "nemo_launcher.jobs.gpt.lora_file"),
    ]
