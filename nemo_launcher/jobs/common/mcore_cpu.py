"""Runs megatron-core 0.16 on a CPU (gloo) by monkeypatching it; forks no megatron code.

    import megatron.core.models.gpt, megatron.core.pipeline_parallel, ...   # everything you will use
    apply_cpu_shim()                                                        # then this, once
    parallel_state.initialize_model_parallel(...)

megatron-core hard-codes CUDA in about 570 places (`torch.cuda.current_device()`, `device="cuda"`,
CUDA RNG trackers, `torch.cuda.synchronize()`), so patching call sites one by one cannot keep up.
Instead every loaded `megatron.core.*` module gets a `torch` proxy that sends CUDA devices to the CPU;
a few functions that test tensor types or CUDA generators are replaced outright. Only modules that are
already imported are patched, hence the import-first rule above. Never call this on a GPU run: it would
move megatron's buffers to the CPU. Facts and measurements: shared/notes/megatron-core-on-cpu.md.
"""

import contextlib
import functools
import math
import sys

import torch

_applied = False


def _to_cpu(kwargs: dict) -> dict:
    device = kwargs.get("device")
    if device is not None and (isinstance(device, int) or str(device).startswith("cuda")):
        kwargs["device"] = "cpu"
    return kwargs


class _CudaNamespace:
    """`torch.cuda` as megatron modules see it: the current device is the CPU and syncs are free."""

    def __getattr__(self, name):
        return getattr(torch.cuda, name)

    @staticmethod
    def current_device():
        return torch.device("cpu")

    @staticmethod
    def synchronize(*args, **kwargs):
        return None


class _TorchProxy:
    """`torch` as megatron modules see it: any callable given device="cuda" or an int gets the CPU instead."""

    cuda = _CudaNamespace()

    def __init__(self):
        self._wrapped = {}

    def __getattr__(self, name):
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            target = getattr(torch, name)
            # Classes stay classes (isinstance checks), modules stay modules; only functions are wrapped.
            if callable(target) and not isinstance(target, type):

                @functools.wraps(target)
                def wrapped(*args, _target=target, **kwargs):
                    return _target(*args, **_to_cpu(kwargs)) if "device" in kwargs else _target(*args, **kwargs)
            else:
                wrapped = target
            self._wrapped[name] = wrapped
        return wrapped


def apply_cpu_shim() -> None:
    """Idempotent. Patches the megatron.core modules imported so far (see the module docstring)."""
    global _applied
    import megatron.core.optimizer.clip_grads as clip_grads
    import megatron.core.optimizer.optimizer as optimizer
    import megatron.core.tensor_parallel.random as mp_random
    import megatron.core.utils as mcore_utils
    from megatron.core.utils import to_local_if_dtensor

    if not _applied:

        def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
            # The global buffer allocates on torch.cuda.current_device(); a CPU buffer of the same shape.
            needed = math.prod(tensor_shape)
            buffer = self.buffer.get((name, dtype))
            if buffer is None or buffer.numel() < needed:
                buffer = self.buffer[(name, dtype)] = torch.empty(needed, dtype=dtype, device="cpu")
            return buffer[0:needed].view(*tensor_shape)

        mcore_utils.GlobalMemoryBuffer.get_tensor = get_tensor

        def tracker_add(self, name, seed):
            # The model-parallel RNG tracker keeps CUDA generator states; keep CPU generator states instead.
            if seed in self.seeds_ or name in self.states_:
                raise Exception(f"RNG state {name} / seed {seed} already exists")
            self.seeds_.add(seed)
            saved = torch.get_rng_state()
            torch.manual_seed(seed)
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)

        @contextlib.contextmanager
        def tracker_fork(self, name=mp_random._MODEL_PARALLEL_RNG_TRACKER_NAME):
            saved = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(saved)

        mp_random.CudaRNGStatesTracker.add = tracker_add
        mp_random.CudaRNGStatesTracker.fork = tracker_fork
        mp_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
        mp_random._set_cuda_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)

        def clip_by_total_norm(parameters, max_norm, total_norm, use_decoupled_grad=False):
            # The original asserts `grad.type() == 'torch.cuda.FloatTensor'` before scaling.
            factor = max_norm / (total_norm + 1.0e-6)
            if factor < 1.0:
                params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
                for param in params:
                    grad = param.decoupled_grad if use_decoupled_grad else param.grad
                    if grad is not None:
                        to_local_if_dtensor(grad).detach().mul_(factor)

        clip_grads.clip_grad_by_total_norm_fp32 = clip_by_total_norm
        optimizer.clip_grad_by_total_norm_fp32 = clip_by_total_norm
        _applied = True

    proxy = _PROXY
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron.core") and getattr(module, "torch", None) is torch:
            module.torch = proxy


_PROXY = _TorchProxy()


@contextlib.contextmanager
def tensor_cuda_is_noop():
    """`Tensor.cuda()` returns the tensor itself while building a model on a CPU. The proxy cannot reach
    method calls on tensors; GPTModel calls `.cuda()` on its tied embedding when PP > 1 (and CLIPViT on a
    position table), which would fail on a CPU-only torch."""
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.cuda = original
