# shellcheck shell=bash
# Oracle Cloud (BM.GPU4.8 / BM.GPU.A100-v2.8 bare metal, RoCE v2 cluster network) settings
# for the cluster validation tools. Sourced by csp_tools/common/*; keep to plain
# assignments, since tests compare the NCCL values here with conf/env_presets/oci.yaml.
#
# No topo.xml: on bare metal NCCL reads the real PCI tree itself.

# RoCE v2 addresses live at GID index 3 on OCI's cluster network; NCCL's
# default (index 0, RoCE v1) does not route between hosts there.
export NCCL_IB_GID_INDEX=3
# Several queue pairs per connection spread traffic over the network's ECMP paths.
export NCCL_IB_QPS_PER_CONNECTION=4

# Minimum average all_reduce_perf bus bandwidth of a node pair, GB/s.
# Sixteen 100 Gb/s RoCE links per host; healthy pairs measure well above this.
# shellcheck disable=SC2034  # read by common/nccl.sh and cluster_validation.sh
CV_DEFAULT_BUSBW_THRESHOLD=120
