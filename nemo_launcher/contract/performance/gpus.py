"""What a device can do, for the step-time model: peak rates, memory, and the bandwidths of its links.

    profile = GPU_PROFILES["a100-80gb"]              # the cluster's cluster.gpu_type
    profile = cpu_profile(measured_flops_per_s=3.1e10, memory_gib=16)   # a CPU, from a rate measured at start
    peak_bf16_flops("NVIDIA H100 80GB HBM3")          # the job side's MFU denominator, by CUDA device name

Sources: the vendors' data sheets for peaks (dense, no sparsity), memory and bandwidths (A100: NVIDIA A100 Tensor
Core GPU data sheet; H100/H200: NVIDIA H100 and H200 data sheets, SXM parts); the DGX networks: 8 HDR (200 Gb/s)
rails for A100 nodes, 8 NDR (400 Gb/s) for H100/H200. Achievable fractions: the shape of the matrix-efficiency curve
(how a multiply's size limits it), 0.9 of HBM bandwidth, 0.6 of NVLink and 0.9 of InfiniBand bandwidth come from the
Calculon system files (calculon-ai/calculon systems/a100_80g.json and h100_80g_nvl8.json, SC'23). The curve's top is
what Megatron's large runs reach end to end, where kernels the model does not time (launch gaps, small fused
kernels, synchronisation) take their share: about 0.6 of peak on A100 (Korthikanti et al. 2022, Table 5: 57%
hardware FLOPs utilisation for the 530B and 1T models) and about 0.5 on H100 (Megatron-LM's README: up to 47% MFU
for its H100 runs). None of these numbers is fitted to the seed's throughput tables, which stay a held-out check.
"""

import bisect
import dataclasses
from collections.abc import Mapping

# Matrix-unit efficiency by the work of one matrix multiply, in GFLOP (Calculon's float16 curve for A100 and
# H100, whose top is 0.95): a small multiply cannot fill the tensor cores. Ascending thresholds; between two points
# the lower one holds.
_CALCULON_MATRIX_EFFICIENCY = ((0.0, 0.1), (1.0, 0.6), (16.0, 0.9), (128.0, 0.95))


def _matrix_curve(top: float) -> tuple[tuple[float, float], ...]:
    """Calculon's curve scaled so its largest multiplies reach `top` of peak."""
    scale = top / _CALCULON_MATRIX_EFFICIENCY[-1][1]
    return tuple((gflop, efficiency * scale) for gflop, efficiency in _CALCULON_MATRIX_EFFICIENCY)


A100_MATRIX_TOP = 0.6  # Korthikanti et al. 2022, Table 5 (A100): 57% of peak for the largest models
H100_MATRIX_TOP = 0.5  # Megatron-LM README: up to 47% MFU on H100


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """One accelerator (or a CPU) as the step-time model sees it. Rates are per device."""

    name: str  # the cluster.gpu_type spelling, e.g. "a100-80gb"
    memory_gib: float  # memory a program can use, GiB
    peak_flops: Mapping[str, float]  # FLOP/s by precision: "bf16", "fp16", "fp8", "tf32", "fp32"
    hbm_bytes_per_s: float  # device memory bandwidth, bytes/s
    nvlink_bytes_per_s: float  # one direction, per device, to the devices of its node, bytes/s
    network_bytes_per_s: float  # one direction, per device, to other nodes (its share of the node's NICs), bytes/s
    devices_per_node: int = 8  # how many share the NVLink domain
    matrix_efficiency: tuple[tuple[float, float], ...] = _matrix_curve(A100_MATRIX_TOP)
    hbm_efficiency: float = 0.9
    nvlink_efficiency: float = 0.6
    network_efficiency: float = 0.9
    # Host time to issue one operation where nothing hides it: a GPU's launches run ahead of its kernels (0 here),
    # a CPU runs each operation's dispatch before its work.
    op_overhead_s: float = 0.0
    # Fixed time of one collective (the bandwidth term is separate); NCCL's microseconds vanish on GPUs.
    collective_latency_s: float = 0.0
    # What a training process holds beyond its tensors, GiB: the CUDA context, NCCL communicators' buffers, cuBLAS
    # and Transformer Engine workspaces and the caching allocator's fragmentation (typical of DGX runs; nvidia-smi
    # shows the CUDA context alone at 0.5-1 GiB). A CPU process needs none of it.
    framework_overhead_gib: float = 3.0

    def peak(self, precision: str) -> float:
        """Peak FLOP/s for a trainer precision (bf16, 16, 32, fp8); a precision the part lacks runs at bf16's."""
        key = {"16": "fp16", "16-mixed": "fp16", "bf16-mixed": "bf16", "32": "fp32", "32-true": "fp32"}.get(
            str(precision), str(precision)
        )
        return self.peak_flops.get(key) or self.peak_flops["bf16"]

    def matmul_efficiency(self, gflop: float) -> float:
        """Fraction of peak one matrix multiply of `gflop` GFLOP reaches."""
        thresholds = [point for point, _ in self.matrix_efficiency]
        return self.matrix_efficiency[max(bisect.bisect_right(thresholds, gflop) - 1, 0)][1]


_GB = 1e9
_A100 = {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}
_H100 = {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 494e12, "fp32": 67e12}

GPU_PROFILES: dict[str, DeviceProfile] = {
    profile.name: profile
    for profile in (
        # NVLink 3: 600 GB/s both directions; HDR InfiniBand 200 Gb/s = 25 GB/s per GPU.
        DeviceProfile("a100-40gb", 40.0, _A100, 1555 * _GB, 300 * _GB, 25 * _GB),
        DeviceProfile("a100-80gb", 80.0, _A100, 2039 * _GB, 300 * _GB, 25 * _GB),
        # NVLink 4: 900 GB/s both directions; NDR InfiniBand 400 Gb/s = 50 GB/s per GPU. nvidia-smi shows
        # 81559 MiB (H100) and 143771 MiB (H200).
        DeviceProfile("h100-80gb", 79.6, _H100, 3350 * _GB, 450 * _GB, 50 * _GB, 8, _matrix_curve(H100_MATRIX_TOP)),
        DeviceProfile("h200-141gb", 140.4, _H100, 4800 * _GB, 450 * _GB, 50 * _GB, 8, _matrix_curve(H100_MATRIX_TOP)),
    )
}
DEFAULT_GPU_TYPE = "a100-80gb"  # the seed's figures are DGX A100 80GB


def cpu_profile(
    measured_flops_per_s: float,
    memory_gib: float,
    memory_bytes_per_s: float = 10 * _GB,
    link_bytes_per_s: float = 2 * _GB,
    processes_per_node: int = 1,
    op_overhead_s: float = 20e-6,
    collective_latency_s: float = 100e-6,
) -> DeviceProfile:
    """A CPU process as a device, from a matrix-multiply rate measured on this machine (FLOP/s) rather than a data
    sheet. The measured rate already is what a multiply of the model's size reaches, so its efficiency curve is
    flat; processes of one node talk through shared memory (`link_bytes_per_s`, the Gloo rate). PyTorch's eager
    dispatch costs tens of microseconds an operation and a Gloo collective about a hundred, which a tiny model's
    step feels: pass measured values where there are some."""
    return DeviceProfile(
        name="cpu",
        memory_gib=memory_gib,
        peak_flops={"bf16": measured_flops_per_s, "fp32": measured_flops_per_s},
        hbm_bytes_per_s=memory_bytes_per_s,
        nvlink_bytes_per_s=link_bytes_per_s,
        network_bytes_per_s=link_bytes_per_s,
        devices_per_node=processes_per_node,
        matrix_efficiency=((0.0, 1.0),),
        hbm_efficiency=1.0,
        nvlink_efficiency=1.0,
        network_efficiency=1.0,
        op_overhead_s=op_overhead_s,
        collective_latency_s=collective_latency_s,
        framework_overhead_gib=0.0,
    )


# Dense bf16 tensor-core peaks by CUDA device name, FLOP/s, from the vendors' data sheets (SXM parts unless the
# name says): the job side's MFU divides by these. First match wins, so longer names come first.
DEVICE_PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("A10G", 70e12),
)


def peak_bf16_flops(device_name: str) -> float | None:
    """Peak of the named GPU (torch.cuda.get_device_name()), or None when it is not in the table."""
    for fragment, peak in DEVICE_PEAK_BF16:
        if fragment.lower() in device_name.lower():
            return peak
    return None
