"""The job package's import hooks (nemo_launcher/jobs/common/import_hooks.py): megatron-core's fused functions
compile on their first call instead of importing the compiler when megatron-core is imported, torchmetrics
(which Lightning imports) imports on its first try with torch-fidelity installed and torchvision absent, and an
optimizer steps and Lightning imports without TorchDynamo, to the same weights as plain torch, and megatron-core
imports without TensorBoard, which imports as before for whoever logs to it, and without SymPy (DTensor's symbolic-shape
helpers load on their first use and then replace their stand-ins), and Lightning checks a local folder without
importing the cloud file systems."""

import subprocess
import sys

from nemo_launcher.jobs.common.import_hooks import compile_on_first_call
from nemo_launcher.launch.resolvers import REPO_ROOT


def _fresh_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_stand_in_compiles_once_on_the_first_call_with_the_options_given():
    compiled = []

    def fake_compile(function, **options):
        compiled.append((function.__name__, options))
        return lambda *args: ("compiled", function(*args))

    stand_in = compile_on_first_call(fake_compile)

    @stand_in
    def double(x):
        return 2 * x

    @stand_in(mode="max-autotune")
    def triple(x):
        return 3 * x

    assert compiled == [] and double.__name__ == "double"
    assert double(2) == ("compiled", 4) and double(3) == ("compiled", 6)
    assert triple(1) == ("compiled", 3)
    assert compiled == [("double", {}), ("triple", {"mode": "max-autotune"})]


def test_megatron_core_imports_without_the_compiler_and_its_fused_functions_compile_later():
    out = _fresh_python(
        "import sys, nemo_launcher.jobs, torch, megatron.core\n"
        "from megatron.core.fusions import fused_bias_geglu, fused_bias_gelu\n"
        "print('torch._inductor.compile_fx' in sys.modules, fused_bias_geglu.geglu.compiles_on_first_call,\n"
        "      fused_bias_gelu.bias_gelu.compiles_on_first_call, torch.compile.__module__)\n"
    )
    assert out.split() == ["False", "True", "True", "torch"]  # torch.compile itself is the real one again


def test_torchmetrics_imports_on_the_first_try_and_lightning_sees_its_version():
    out = _fresh_python(
        "import nemo_launcher.jobs, torchmetrics, pytorch_lightning\n"
        "from lightning_fabric.utilities.imports import _TORCHMETRICS_GREATER_EQUAL_1_0_0\n"
        "from torchmetrics.image.fid import _FeatureExtractorInceptionV3\n"
        "print(_TORCHMETRICS_GREATER_EQUAL_1_0_0)\n"
    )
    assert out.split() == ["True"], out


def test_lightning_imports_torchmetrics_without_scipy_signal_transformers_or_matplotlib():
    out = _fresh_python(
        "import sys, nemo_launcher.jobs, pytorch_lightning, torch\n"
        "from torchmetrics import Metric\n"
        "from torchmetrics.utilities import imports\n"
        "heavy = [name for name in ('scipy.signal', 'transformers', 'matplotlib') if name in sys.modules]\n"
        "class Total(Metric):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.add_state('total', default=torch.tensor(0.0), dist_reduce_fx='sum')\n"
        "    def update(self, x):\n"
        "        self.total += x.sum()\n"
        "    def compute(self):\n"
        "        return self.total\n"
        "total = Total()\n"
        "total.update(torch.ones(3)); total.update(torch.ones(2))\n"
        "import scipy.signal, transformers\n"  # still importable by whoever needs them
        "print(heavy, float(total.compute()), imports._SCIPI_AVAILABLE, hasattr(scipy.signal, 'windows'),\n"
        "      hasattr(transformers, 'CLIPTextModel'))\n"
    )
    assert out.split() == ["[]", "5.0", "False", "True", "True"], out


# An AdamW step and a Lightning import, then what the compiler-dependent pieces answer; printed as one JSON line.
_OPTIMIZER_STEP = """
import json, sys
{hooks}
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 3)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).sum().backward()
    optimizer.step()
weights = [round(float(v), 7) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]
grad_mode = torch.is_grad_enabled()
import pytorch_lightning
from lightning_fabric.wrappers import _unwrap_compiled
from pytorch_lightning.utilities.compile import from_compiled
before = 'torch._dynamo' in sys.modules
plain_unwrapped = _unwrap_compiled(model)[0] is model
compiled = torch.compile(model)  # imports TorchDynamo: the stand-ins now answer as the real class
unwrapped = _unwrap_compiled(compiled)[0] is model
optimizer.step()  # the real step wrapper, now that TorchDynamo is imported
print(json.dumps({{"weights": weights, "grad_mode": grad_mode, "dynamo_before": before, "plain": plain_unwrapped,
                  "compiled_unwrapped": unwrapped}}))
"""


def test_training_steps_and_lightning_import_without_the_compiler_and_give_the_same_weights():
    import json

    ours = json.loads(_fresh_python(_OPTIMIZER_STEP.format(hooks="import nemo_launcher.jobs")))
    plain = json.loads(_fresh_python(_OPTIMIZER_STEP.format(hooks="")))
    assert ours["dynamo_before"] is False and plain["dynamo_before"] is True
    assert ours["weights"] == plain["weights"] and ours["grad_mode"] is True
    # Lightning's OptimizedModule test: nothing is one before TorchDynamo, a compiled module is one after.
    assert ours["plain"] and ours["compiled_unwrapped"] and plain["compiled_unwrapped"]


def test_megatron_core_imports_without_tensorboard_and_its_timers_still_know_a_real_writer():
    out = _fresh_python(
        "import sys, nemo_launcher.jobs, megatron.core, tempfile\n"
        "from megatron.core import timers\n"
        "before = [name for name in ('tensorboard', 'torch.utils.tensorboard') if name in sys.modules]\n"
        "plain = isinstance(object(), timers.SummaryWriter)\n"
        "from torch.utils.tensorboard import SummaryWriter\n"  # as Lightning's TensorBoardLogger imports it
        "writer = SummaryWriter(tempfile.mkdtemp())\n"
        "subclass = issubclass(SummaryWriter, timers.SummaryWriter)\n"
        "print(before, plain, isinstance(writer, timers.SummaryWriter), subclass,\n"
        "      type(sys.modules['torch.utils.tensorboard']).__name__)\n"
    )
    assert out.split() == ["[]", "False", "True", "True", "module"], out


def test_megatron_core_imports_without_sympy_and_dtensors_helpers_become_the_real_ones_on_first_use():
    out = _fresh_python(
        "import sys, nemo_launcher.jobs, megatron.core, megatron.core.dist_checkpointing\n"
        "from torch.distributed.tensor import _collective_utils, _decompositions\n"
        "before = [name for name in ('sympy', 'torch.fx.experimental.symbolic_shapes') if name in sys.modules]\n"
        "kept = [_decompositions.GuardOnDataDependentSymNode]\n"  # in a list: a module-level name would be re-bound
        "answers = [_collective_utils.guard_or_false(True), _collective_utils.guard_or_false(False)]\n"
        "from torch.fx.experimental import symbolic_shapes as real\n"
        "print(before, answers, 'sympy' in sys.modules, kept[0] is real.GuardOnDataDependentSymNode,\n"
        "      _decompositions.GuardOnDataDependentSymNode is real.GuardOnDataDependentSymNode,\n"
        "      _collective_utils.guard_or_false is real.guard_or_false)\n"
    )
    assert out.split() == ["[]", "[True,", "False]", "True", "False", "True", "True"], out


def test_a_real_import_of_the_shapes_module_rebinds_dtensors_names_before_anything_is_called():
    out = _fresh_python(
        "import nemo_launcher.jobs, megatron.core\n"
        "from torch.distributed.tensor import _decompositions\n"
        "import torch._dynamo\n"  # what diffusers does: TorchDynamo imports the real module
        "from torch.fx.experimental import symbolic_shapes as real\n"
        "print(_decompositions.GuardOnDataDependentSymNode is real.GuardOnDataDependentSymNode)\n"
    )
    assert out.split() == ["True"], out


def test_lightning_checks_a_local_folder_without_the_cloud_file_systems_and_asks_them_for_others():
    out = _fresh_python(
        "import sys, tempfile, nemo_launcher.jobs, pytorch_lightning, fsspec\n"
        "from lightning_fabric.utilities.cloud_io import _is_dir, _is_object_storage, get_filesystem\n"
        "folder = tempfile.mkdtemp()\n"
        "local = [_is_dir(get_filesystem(folder), folder), _is_object_storage(get_filesystem(folder))]\n"
        "before = 's3fs' in sys.modules\n"
        "memory = _is_object_storage(fsspec.filesystem('memory'))\n"
        "print(local, before, memory, 's3fs' in sys.modules)\n"
    )
    assert out.split() == ["[True,", "False]", "False", "False", "True"], out
