# shellcheck shell=bash
# Azure (ND96asr_v4 / ND96amsr_A100_v4, 8 x HDR InfiniBand) settings for the cluster validation tools.
# Sourced by csp_tools/common/*; keep to plain assignments, since tests compare
# the NCCL values here with conf/env_presets/azure.yaml, which training jobs use.
#
# topo.xml beside this file describes the VM's GPU/NIC layout, which the VM's
# virtual PCI tree hides from NCCL; lib.sh points NCCL_TOPO_FILE at it.

# The VMs support PCIe relaxed ordering for the InfiniBand NICs, but NCCL (2 =
# use it where available) and UCX use it only when told; GPUDirect RDMA loses
# bandwidth without it.
export UCX_IB_PCI_RELAXED_ORDERING=auto
export NCCL_IB_PCI_RELAXED_ORDERING=2
# Longer InfiniBand retry timeout (4.096 us * 2^22, about 17 s) rides out fabric hiccups.
export NCCL_IB_TIMEOUT=22
# Print NCCL's transport choices into the logs, to see whether the topology was used.
export NCCL_DEBUG=INFO

# Minimum average all_reduce_perf bus bandwidth of a node pair, GB/s.
# Eight 200 Gb/s HDR links per VM; healthy pairs measure about 180 GB/s.
# shellcheck disable=SC2034  # read by common/nccl.sh and cluster_validation.sh
CV_DEFAULT_BUSBW_THRESHOLD=150
