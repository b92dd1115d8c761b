"""Three third-party imports that job processes make differently, all through one finder in front of the import
system. `install()` runs when the job package is imported (nemo_launcher/jobs/__init__.py), before anything
imports torch; standard library only.

1. megatron-core's fused kernels compile when first called, not when megatron-core is imported.
   megatron.core.jit picks `torch.compile` as the fuser for its fused functions (bias-GeLU, bias-dropout-add,
   SwiGLU, ...), and `torch.compile` imports TorchDynamo's compiler front end and Inductor as soon as it wraps a
   function, although it compiles only on the first call. That is about a second of CPU time at the start of every
   job process (each rank, each conversion or evaluation step), even where no fused function ever runs: on CPUs,
   and wherever a config turns the fusions off. While megatron.core.jit's body runs, `torch.compile` is a stand-in
   that wraps without importing anything and calls the real `torch.compile` on the first call; what runs is the
   same compiled function as before.

2. torch-fidelity imports without torchvision. Its package `__init__` imports its CLIP and DINOv2 extractors, which
   import torchvision; torchvision's wheels do not import with the CPU torch (requirements-nodeps.txt installs
   torch-fidelity without it). FID needs only the Inception module, which imports torch alone. Left as it is,
   `import torchmetrics` (which PyTorch Lightning imports) failed on its first try: torchmetrics sees torch-fidelity
   installed and imports its Inception module, the package `__init__` raises, and Lightning concludes from the
   failure that torchmetrics is older than 1.0. Where torchvision cannot be found, `torch_fidelity` is loaded as
   its bare package (its submodules importable, its `__init__` not run).

3. torchmetrics imports without SciPy's signal package, transformers and matplotlib. Lightning imports torchmetrics
   for its `Metric` class alone; torchmetrics' package `__init__` imports every metric it has, and for those it
   imports `scipy.signal` (audio metrics), `transformers` (BERTScore, CLIPScore) and `matplotlib` (plots) wherever
   they are installed, which they are here for other reasons. That was about 2-3 s of CPU at the start of every
   process that imports Lightning. In job processes torchmetrics sees those three as absent (its availability flags
   say False): its audio, text-embedding, CLIP and plotting metrics are unusable there, and nothing of ours uses
   them. The packages themselves import as usual for whoever needs them (the diffusion text encoders, HF export).
"""
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys

JIT_MODULE = "megatron.core.jit"  # picks torch.compile as megatron-core's fuser when imported
FIDELITY_PACKAGE = "torch_fidelity"
METRICS_PACKAGE = "torchmetrics"  # imports scipy.signal in its __init__ when SciPy is installed
METRICS_FLAGS_MODULE = "torchmetrics.utilities.imports"
METRICS_FLAGS_OFF = ("_SCIPI_AVAILABLE", "_TRANSFORMERS_GREATER_EQUAL_4_4", "_TRANSFORMERS_GREATER_EQUAL_4_10",
                     "_MATPLOTLIB_AVAILABLE")


def compile_on_first_call(compile_function):
    """A stand-in for `compile_function` (torch.compile) that defers it to the wrapped function's first call.

    Takes the same arguments: `stand_in(fn, **options)` or `stand_in(**options)(fn)`.
    """

    def stand_in(model=None, **options):
        if model is None:  # used as @torch.compile(mode=...)
            return lambda function: stand_in(function, **options)
        compiled = None

        @functools.wraps(model)
        def call(*args, **kwargs):
            nonlocal compiled
            if compiled is None:
                compiled = compile_function(model, **options)
            return compiled(*args, **kwargs)

        call.compiles_on_first_call = True
        return call

    return stand_in


class _WrappedLoader(importlib.abc.Loader):
    """A module's own loader with something done around its body."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)


class _JitModuleLoader(_WrappedLoader):
    """megatron.core.jit's own loader, run with torch.compile replaced for the length of the module's body."""

    def exec_module(self, module):
        import torch  # megatron.core.jit imports it first thing anyway

        real = torch.compile
        torch.compile = compile_on_first_call(real)
        try:
            self._loader.exec_module(module)
        finally:
            torch.compile = real


class _MetricsPackageLoader(_WrappedLoader):
    """torchmetrics' `__init__`, run while lightning_utilities says SciPy is not installed (the only test it makes
    before importing scipy.signal)."""

    def exec_module(self, module):
        from lightning_utilities.core import imports

        real = imports.package_available
        imports.package_available = lambda name: name != "scipy" and real(name)
        try:
            self._loader.exec_module(module)
        finally:
            imports.package_available = real


class _MetricsFlagsLoader(_WrappedLoader):
    """torchmetrics' table of optional packages, with the ones only unused metrics import turned off."""

    def exec_module(self, module):
        self._loader.exec_module(module)
        for flag in METRICS_FLAGS_OFF:
            if hasattr(module, flag):
                setattr(module, flag, False)


class _BarePackageLoader(importlib.abc.Loader):
    """The package's module with its search path set (by the import system, from the spec) and no `__init__` run."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        """Runs nothing on purpose: torch-fidelity's `__init__` imports torchvision, which the finder found missing;
        the submodules it needs (the Inception network) import on their own from the search path."""


class _Finder(importlib.abc.MetaPathFinder):
    _WRAPPERS = {JIT_MODULE: _JitModuleLoader, METRICS_PACKAGE: _MetricsPackageLoader,
                 METRICS_FLAGS_MODULE: _MetricsFlagsLoader}

    def find_spec(self, name, path, target=None):
        if name in self._WRAPPERS:
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = self._WRAPPERS[name](spec.loader)
            return spec
        if name == FIDELITY_PACKAGE and importlib.util.find_spec("torchvision") is None:
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is not None and spec.submodule_search_locations is not None:
                spec.loader = _BarePackageLoader()
            return spec
        return None


def install() -> None:
    """Idempotent. A module imported before it keeps the way it was imported."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
