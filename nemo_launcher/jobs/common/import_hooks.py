"""Seven third-party imports that job processes make differently, all through one finder in front of the import
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

4. Training imports TorchDynamo only to compile. TorchDynamo (with SymPy) is about 1.4 s of CPU at the start of
   every training process, although our jobs never compile. Four places ask for it: torch's optimizers wrap their
   methods with `torch._disable_dynamo` (it imports TorchDynamo on the first call) and their `step` with
   `_use_grad_for_differentiable` (it imports TorchDynamo on every call, for `graph_break()`, a function that does
   nothing outside compilation); Lightning's `lightning_fabric.wrappers` and `pytorch_lightning.utilities.compile`
   import it for one class, `OptimizedModule` (what `torch.compile` returns for a module), to test objects
   against; and Lightning's result collection decorates two methods with `torch.compiler.disable`, which imports
   it at once. Nothing can be compiling while TorchDynamo is not imported, so until it is (whoever imports it):
   a function `torch._disable_dynamo` or, while Lightning's bodies run, `torch.compiler.disable` wraps runs
   straight (the really disabled function is built on the first call after); an optimizer step sets grad mode
   as `_use_grad_for_differentiable` does, without the graph breaks. While Lightning's bodies run, `torch._dynamo`
   is a stand-in module whose `OptimizedModule` is a stand-in class: an object is an instance of it exactly when
   it is one of the real class (none can be while TorchDynamo is not imported); any other name asked of the
   stand-in imports the real package and answers from it. (diffusers imports TorchDynamo for its own decorators,
   so the diffusion jobs still load it, and everything above then takes the real path.)

5. megatron-core imports TensorBoard only for whoever writes to it. megatron.core.timers imports TensorBoard's
   `SummaryWriter` (with TensorBoard, its protobuf messages and boto3: about 0.3 s of CPU) for one test,
   `isinstance(writer, SummaryWriter)` in `Timers.write`, which our jobs never call. While its body runs,
   `torch.utils.tensorboard` is a stand-in module whose `SummaryWriter` is a stand-in class: an object is an
   instance of it exactly when it is one of the real class (none can be while TensorBoard's writer is not
   imported). Jobs that log to TensorBoard (exp_manager.create_tensorboard_logger) import the real one through
   Lightning as before; the others (conversion, evaluation, export, ...) no longer load it.

6. DTensor imports SymPy only for symbolic shapes. megatron-core imports torch's DTensor package
   (`torch.distributed.tensor`) in megatron.core.utils, and three of its modules bind helpers of
   `torch.fx.experimental.symbolic_shapes` at import: `guard_or_false`, `statically_known_true` and the exception
   `GuardOnDataDependentSymNode`. That module imports SymPy: about 0.5 s of CPU at the start of every process that
   imports megatron-core, for helpers that matter only when tensors have symbolic sizes (under compilation), which
   cannot exist before the module is imported. While the DTensor package's body runs, the module is a stand-in
   whose two helpers import the real module on their first call and answer from it (with concrete sizes they
   answer as before), and whose exception class is a placeholder; any other name asked of it imports the real
   module. When the real module is imported (by a first call, by TorchDynamo, by anyone), every name a module
   bound to a stand-in is re-bound to the real object, so an `except GuardOnDataDependentSymNode` catches the real
   exception from then on.

7. Lightning asks whether a local directory is object storage without importing the cloud SDKs.
   `lightning_fabric.utilities.cloud_io._is_object_storage`, called whenever Lightning checks a directory
   (checkpoint folder, logger folder), imports s3fs (with aiobotocore and aiohttp: about 0.2 s of CPU) and the
   other installed cloud file systems to test the file system against their classes. fsspec's local file system is
   none of them, so for it the answer is False at once; any other file system is asked as before.
"""

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

JIT_MODULE = "megatron.core.jit"  # picks torch.compile as megatron-core's fuser when imported
FIDELITY_PACKAGE = "torch_fidelity"
METRICS_PACKAGE = "torchmetrics"  # imports scipy.signal in its __init__ when SciPy is installed
METRICS_FLAGS_MODULE = "torchmetrics.utilities.imports"
METRICS_FLAGS_OFF = (
    "_SCIPI_AVAILABLE",
    "_TRANSFORMERS_GREATER_EQUAL_4_4",
    "_TRANSFORMERS_GREATER_EQUAL_4_10",
    "_MATPLOTLIB_AVAILABLE",
)
DYNAMO_PACKAGE = "torch._dynamo"
TORCH_LAZY_COMPILE_MODULE = "torch._compile"  # torch's `_disable_dynamo`, bound by torch's modules as torch imports
TORCH_OPTIMIZER_MODULE = "torch.optim.optimizer"  # `_use_grad_for_differentiable`, which wraps every `step`
LIGHTNING_PACKAGES = ("lightning_fabric", "pytorch_lightning")  # their bodies import all their modules
TIMERS_MODULE = "megatron.core.timers"  # imports SummaryWriter for an isinstance test
TENSORBOARD_MODULE = "torch.utils.tensorboard"
DTENSOR_PACKAGE = "torch.distributed.tensor"  # binds symbolic-shape helpers as its modules import
SHAPES_MODULE = "torch.fx.experimental.symbolic_shapes"  # imports SymPy
SHAPES_DEFERRED_FUNCTIONS = ("guard_or_false", "statically_known_true")
SHAPES_DEFERRED_EXCEPTIONS = ("GuardOnDataDependentSymNode",)
CLOUD_IO_MODULE = "lightning_fabric.utilities.cloud_io"  # imports cloud SDKs to test a local file system


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


def disable_on_first_call(disable_function):
    """A stand-in for `disable_function` (torch._disable_dynamo, torch.compiler.disable): the wrapped function runs
    straight while TorchDynamo is not imported, and through `disable_function(fn, ...)` (built once) after that.

    Takes the same arguments: `stand_in(fn, recursive, ...)` or `stand_in(recursive=...)(fn)`.
    """

    def stand_in(fn=None, *args, **options):
        if fn is None:  # used as @torch._disable_dynamo(recursive=False)
            return lambda function: stand_in(function, *args, **options)
        disabled = None

        @functools.wraps(fn)
        def call(*call_args, **call_kwargs):
            nonlocal disabled
            if DYNAMO_PACKAGE not in sys.modules:  # no compiler loaded: nothing is being compiled
                return fn(*call_args, **call_kwargs)
            if disabled is None:
                disabled = disable_function(fn, *args, **options)
            return disabled(*call_args, **call_kwargs)

        call.disables_on_first_call = True
        return call

    stand_in.is_stand_in = True
    return stand_in


def grad_mode_step(use_grad_for_differentiable):
    """A stand-in for torch.optim's `_use_grad_for_differentiable`: while TorchDynamo is not imported, the step runs
    with grad mode set to the optimizer's `differentiable` default and restored after, as the real wrapper does
    (whose two `graph_break()` calls do nothing outside compilation); after, the real wrapper runs."""

    def decorator(func):
        real = use_grad_for_differentiable(func)

        @functools.wraps(func)
        def step(*args, **kwargs):
            if DYNAMO_PACKAGE in sys.modules:
                return real(*args, **kwargs)
            import torch  # loaded: this wraps torch's own optimizers

            previous = torch.is_grad_enabled()
            try:
                torch.set_grad_enabled(args[0].defaults["differentiable"])
                return func(*args, **kwargs)
            finally:
                torch.set_grad_enabled(previous)

        return step

    return decorator


class _DynamoClass(type):
    """Metaclass of a stand-in for a class of a module not yet imported (torch._dynamo, by default): isinstance and
    issubclass answer as the real class once that module is imported, and False before (no instance of it can
    exist then)."""

    def _real(cls):
        package = sys.modules.get(getattr(cls, "real_module", DYNAMO_PACKAGE))
        real = getattr(package, cls.__name__, None) if package is not None else None
        return real if isinstance(real, type) and not isinstance(real, _DynamoClass) else None

    def __instancecheck__(cls, obj):
        real = cls._real()
        return real is not None and isinstance(obj, real)

    def __subclasscheck__(cls, subclass):
        real = cls._real()
        return real is not None and issubclass(subclass, real)


class _StandInModule(types.ModuleType):
    """A module not imported yet while another module's body runs (torch._dynamo for Lightning's,
    torch.utils.tensorboard for megatron.core.timers'): its class `class_name` is a stand-in; any other name imports
    the real module (the stand-in leaves sys.modules) and answers from it."""

    def __init__(self, name: str, class_name: str | None = None):
        super().__init__(name)
        if class_name is not None:
            setattr(self, class_name, _DynamoClass(class_name, (), {"__module__": name, "real_module": name}))

    def __getattr__(self, name):
        if name.startswith("__"):  # the import system's own questions (`__path__`, ...): a plain module's answers
            raise AttributeError(name)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def _call_real(module_name: str, function_name: str):
    """A function that imports `module_name` on its first call and calls the real `function_name` from it."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module_name), function_name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = function_name
    call.imports_on_first_call = True
    return call


def _shapes_stand_in() -> _StandInModule:
    """torch.fx.experimental.symbolic_shapes as the DTensor package's bodies use it (hook 6)."""
    stand_in = _StandInModule(SHAPES_MODULE)
    for name in SHAPES_DEFERRED_FUNCTIONS:
        setattr(stand_in, name, _call_real(SHAPES_MODULE, name))
    for name in SHAPES_DEFERRED_EXCEPTIONS:
        # Nothing raises the real exception before the real module is imported, and then this name is re-bound.
        setattr(stand_in, name, type(name, (RuntimeError,), {"__module__": SHAPES_MODULE, "is_stand_in": True}))
    return stand_in


_SHAPES_STAND_INS = {}  # id of a stand-in object of hook 6 -> (its name, itself), until the real module is imported


def _rebind_shapes_stand_ins(real_module) -> None:
    """Every module-level name bound to a stand-in of hook 6 now names the real object. Which modules took one is
    not tracked (the real module may come while the DTensor package is still importing): all are looked at, once
    per process, the one time the real module is imported."""
    if not _SHAPES_STAND_INS:
        return
    for holder in list(sys.modules.values()):
        for attribute, value in list(getattr(holder, "__dict__", {}).items()):
            entry = _SHAPES_STAND_INS.get(id(value))
            if entry is not None and entry[1] is value:
                setattr(holder, attribute, getattr(real_module, entry[0]))
    _SHAPES_STAND_INS.clear()


@contextlib.contextmanager
def _standing_in(name: str, class_name: str | None = None, stand_in: types.ModuleType | None = None):
    """sys.modules[name] is a _StandInModule (or `stand_in`) for the length of the block, unless the real module
    came meanwhile."""
    stand_in = stand_in if stand_in is not None else _StandInModule(name, class_name)
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


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


class _LazyCompileLoader(_WrappedLoader):
    """torch._compile with its `_disable_dynamo` deferred."""

    def exec_module(self, module):
        self._loader.exec_module(module)
        module._disable_dynamo = disable_on_first_call(module._disable_dynamo)


class _OptimizerLoader(_WrappedLoader):
    """torch.optim.optimizer with its step wrapper importing TorchDynamo only once something else has."""

    def exec_module(self, module):
        self._loader.exec_module(module)
        module._use_grad_for_differentiable = grad_mode_step(module._use_grad_for_differentiable)


class _LightningPackageLoader(_WrappedLoader):
    """A Lightning package's `__init__` (which imports the whole package), run with torch._dynamo a stand-in and
    torch.compiler.disable deferred, unless TorchDynamo is already imported (then there is nothing to save)."""

    def exec_module(self, module):
        import torch.compiler  # torch itself: Lightning imports it first thing anyway

        if DYNAMO_PACKAGE in sys.modules or getattr(torch.compiler.disable, "is_stand_in", False):
            self._loader.exec_module(module)  # already imported, or the other Lightning package's body is running
            return
        real_disable = torch.compiler.disable
        with _standing_in(DYNAMO_PACKAGE, "OptimizedModule"):
            torch.compiler.disable = disable_on_first_call(real_disable)
            try:
                self._loader.exec_module(module)
            finally:
                torch.compiler.disable = real_disable


class _TimersLoader(_WrappedLoader):
    """megatron.core.timers' body, run with torch.utils.tensorboard a stand-in unless it is imported already."""

    def exec_module(self, module):
        if TENSORBOARD_MODULE in sys.modules:
            self._loader.exec_module(module)
            return
        with _standing_in(TENSORBOARD_MODULE, "SummaryWriter"):
            self._loader.exec_module(module)


class _DTensorPackageLoader(_WrappedLoader):
    """torch.distributed.tensor's body, run with torch.fx.experimental.symbolic_shapes a stand-in unless it is
    imported already (hook 6)."""

    def exec_module(self, module):
        if SHAPES_MODULE in sys.modules:
            self._loader.exec_module(module)
            return
        stand_in = _shapes_stand_in()
        for name in (*SHAPES_DEFERRED_FUNCTIONS, *SHAPES_DEFERRED_EXCEPTIONS):
            _SHAPES_STAND_INS[id(getattr(stand_in, name))] = (name, getattr(stand_in, name))
        with _standing_in(SHAPES_MODULE, stand_in=stand_in):
            self._loader.exec_module(module)


class _ShapesModuleLoader(_WrappedLoader):
    """The real torch.fx.experimental.symbolic_shapes; once it has run, the stand-ins of hook 6 are replaced."""

    def exec_module(self, module):
        self._loader.exec_module(module)
        _rebind_shapes_stand_ins(module)


class _CloudIOLoader(_WrappedLoader):
    """Lightning's cloud_io, whose object-storage test answers for fsspec's local file system itself (hook 7)."""

    def exec_module(self, module):
        self._loader.exec_module(module)
        module._is_object_storage = local_is_not_object_storage(module._is_object_storage)


def local_is_not_object_storage(is_object_storage):
    """`is_object_storage(fs)` (Lightning's test), answered False for fsspec's local file system without asking."""

    @functools.wraps(is_object_storage)
    def answer(fs):
        from fsspec.implementations.local import LocalFileSystem  # cloud_io imported fsspec already

        return not isinstance(fs, LocalFileSystem) and is_object_storage(fs)

    return answer


class _BarePackageLoader(importlib.abc.Loader):
    """The package's module with its search path set (by the import system, from the spec) and no `__init__` run."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        """Runs nothing on purpose: torch-fidelity's `__init__` imports torchvision, which the finder found missing;
        the submodules it needs (the Inception network) import on their own from the search path."""


class _Finder(importlib.abc.MetaPathFinder):
    _WRAPPERS = {
        JIT_MODULE: _JitModuleLoader,
        METRICS_PACKAGE: _MetricsPackageLoader,
        METRICS_FLAGS_MODULE: _MetricsFlagsLoader,
        TORCH_LAZY_COMPILE_MODULE: _LazyCompileLoader,
        TORCH_OPTIMIZER_MODULE: _OptimizerLoader,
        **dict.fromkeys(LIGHTNING_PACKAGES, _LightningPackageLoader),
        TIMERS_MODULE: _TimersLoader,
        DTENSOR_PACKAGE: _DTensorPackageLoader,
        SHAPES_MODULE: _ShapesModuleLoader,
        CLOUD_IO_MODULE: _CloudIOLoader,
    }

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
