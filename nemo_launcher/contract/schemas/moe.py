"""Mixture-of-experts keys of a decoder's `model` section (Mixtral) and the expert-parallel layout rule.

    class ModelSection(DecoderStackSection, MixtureOfExperts): ...   # the GPT schema takes these keys
    check_expert_layout(model, nodes=8, devices=8, key="training.model")  # -> expert data-parallel size

megatron-core lays the expert layers out on their own grid: expert TP (= TP here) x EP x expert DP x PP = GPUs,
so expert DP = GPUs / (TP x EP x PP), while the attention layers keep DP = GPUs / (TP x PP x CP): the CP ranks of
a sequence join the expert data-parallel group (megatron-core 0.16 `initialize_model_parallel`). Both sides bind
these rules, so the launcher refuses at launch the layout `initialize_model_parallel` or `TransformerConfig` would
refuse after the queue wait.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, positive

LoadBalancing = Literal["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"]
TokenDispatcher = Literal["allgather", "alltoall"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixtureOfExperts:
    """The MoE keys, named as in the reference's Mixtral configs; num_moe_experts null = a dense model."""

    num_moe_experts: int | None = None  # experts per MoE layer (every layer is one when set); null = dense MLPs
    moe_router_topk: int = 2  # experts each token is sent to
    # Auxiliary load-balancing loss added to the LM loss, times this coefficient (0: not added; the trainer still
    # logs the balance as load_balancing_loss).
    moe_aux_loss_coeff: float = 0.0
    moe_router_load_balancing_type: LoadBalancing = "aux_loss"
    moe_z_loss_coeff: float | None = None  # router z-loss coefficient; null = none
    moe_input_jitter_eps: float | None = None  # multiplicative noise on the router's input while training
    # How tokens reach their experts' ranks: allgather (EP = 1 or small) or alltoall (EP > 1).
    moe_token_dispatcher_type: TokenDispatcher = "allgather"
    moe_grouped_gemm: bool = False  # one grouped GEMM for a rank's experts (GPUs with Transformer Engine)
    expert_model_parallel_size: int = 1  # EP: each MoE layer's experts are split over EP ranks

    def check_experts(self, key: str) -> None:
        ep = self.expert_model_parallel_size
        positive(f"{key}.expert_model_parallel_size", ep)
        experts = self.num_moe_experts
        if experts is None:
            if ep > 1:
                raise config_fault(
                    f"{key}.expert_model_parallel_size",
                    ep,
                    "splits experts, and this model has none (num_moe_experts: null); set 1 or num_moe_experts",
                )
            return
        positive(f"{key}.num_moe_experts", experts)
        if experts % ep:
            raise config_fault(
                f"{key}.expert_model_parallel_size",
                ep,
                f"must divide num_moe_experts ({experts}): each EP rank holds num_moe_experts / EP experts",
            )
        if not 1 <= self.moe_router_topk <= experts:
            raise config_fault(
                f"{key}.moe_router_topk", self.moe_router_topk, f"must be between 1 and num_moe_experts ({experts})"
            )
        if self.moe_aux_loss_coeff < 0:
            raise config_fault(f"{key}.moe_aux_loss_coeff", self.moe_aux_loss_coeff, "must be 0 or more")
        if getattr(self, "bias", False) and getattr(self, "tensor_model_parallel_size", 1) > 1:
            raise config_fault(
                f"{key}.bias",
                True,
                "megatron-core's experts take bias terms only without tensor parallelism (expert TP = TP here); "
                "set bias: false or TP 1",
            )


def check_expert_layout(model, nodes: int, devices: int, key: str) -> int | None:
    """The expert layers' grid on nodes x devices GPUs, every factor shown; returns expert DP (None: no experts)."""
    if getattr(model, "num_moe_experts", None) is None:
        return None
    tp, pp = model.tensor_model_parallel_size, model.pipeline_model_parallel_size
    ep = model.expert_model_parallel_size
    world = nodes * devices
    if world % (tp * ep * pp):
        raise config_fault(
            f"{key}.expert_model_parallel_size",
            ep,
            f"the expert layers need TP({tp}) x EP({ep}) x PP({pp}) = {tp * ep * pp} to divide "
            f"nodes({nodes}) x devices({devices}) = {world} (expert DP = GPUs / (TP x EP x PP)); "
            "change EP, the parallel sizes or trainer.num_nodes/trainer.devices",
        )
    return world // (tp * ep * pp)


def check_experts_on_cpu(model, accelerator: str, key: str) -> None:
    """megatron-core's alltoall dispatcher opens a CUDA stream when it is built; on a CPU only allgather runs."""
    if accelerator == "cpu" and model.num_moe_experts is not None and model.moe_token_dispatcher_type != "allgather":
        raise config_fault(
            f"{key}.moe_token_dispatcher_type",
            model.moe_token_dispatcher_type,
            "megatron-core's alltoall dispatcher needs CUDA; set allgather on trainer.accelerator: cpu",
        )
