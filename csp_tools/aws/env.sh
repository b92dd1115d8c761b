# shellcheck shell=bash
# AWS (p4d.24xlarge / p5.48xlarge with EFA) settings for the cluster validation tools.
# Sourced by csp_tools/common/*; keep to plain assignments, since tests compare
# the NCCL values here with conf/env_presets/aws.yaml, which training jobs use.
#
# No topo.xml: the aws-ofi-nccl plugin in the EFA-enabled image ships the
# p4d/p5 topology and hands it to NCCL itself.

# AWS recommends the Simple protocol: LL/LL128 can corrupt data over EFA
# (costs about 2% of training throughput).
export NCCL_PROTO=simple
# Route NCCL's network traffic through libfabric's EFA provider with GPUDirect RDMA.
export FI_PROVIDER=efa
export FI_EFA_USE_DEVICE_RDMA=1

# Minimum average all_reduce_perf bus bandwidth of a node pair, GB/s.
# p4d has 4 x 100 Gb/s EFA (50 GB/s) per node; a healthy pair measures well above this.
# shellcheck disable=SC2034  # read by common/nccl.sh and cluster_validation.sh
CV_DEFAULT_BUSBW_THRESHOLD=30
