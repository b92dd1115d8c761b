"""The performance model against one real GPU: three GPT shapes trained for a few steps, measured next to predicted.

    python3 benchmarks/gpu_check.py [--steps 30]

Needs CUDA, torch and megatron-core (Transformer Engine's layer spec when it is installed, megatron-core's local spec
otherwise); where CUDA is absent it prints one line saying so and exits 1. On the GPU it builds a megatron-core
GPTModel for each shape (about 125M, 350M and 1.3B parameters, sequence 2048, GPT-2's padded vocabulary), trains
it on random tokens for --steps steps in bf16 autocast with fp32 weights and AdamW (18 bytes a weight with the
bf16 copies autocast keeps, as the model counts a job without a distributed optimizer), and prints, per shape, the
measured step time (mean after the first 5 steps), tokens/s, MFU (model FLOPs over the device's bf16 peak) and peak
memory beside the performance model's prediction for the same job on the matching GPU profile. The whole run
takes a few minutes (under 8) on an A100 or H100.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nemo_launcher.contract.performance import GPU_PROFILES, estimate_job, peak_bf16_flops  # noqa: E402

SEQUENCE = 2048
VOCAB = 50304  # GPT-2's 50257 tokens padded to a multiple of 128
WARMUP_STEPS = 5
# name -> (layers, hidden, heads, micro batch)
SHAPES = {
    "gpt-125m": (12, 768, 12, 8),
    "gpt-350m": (24, 1024, 16, 8),
    "gpt-1.3b": (24, 2048, 16, 4),
}


def stage_section(name: str, steps: int) -> dict:
    """The training config the performance model scores for one shape: one GPU, one micro-batch a step."""
    layers, hidden, heads, micro_batch = SHAPES[name]
    return {
        "run": {"name": name},
        "trainer": {"num_nodes": 1, "devices": 1, "precision": "bf16", "max_steps": steps},
        "model": {
            "micro_batch_size": micro_batch,
            "global_batch_size": micro_batch,
            "encoder_seq_length": SEQUENCE,
            "max_position_embeddings": SEQUENCE,
            "num_layers": layers,
            "hidden_size": hidden,
            "ffn_hidden_size": 4 * hidden,
            "num_attention_heads": heads,
            "activations_checkpoint_granularity": None,
            "padded_vocab_size": VOCAB,
            "optim": {"name": "adamw"},
        },
    }


def profile_for(device_name: str, memory_gib: float) -> str:
    """The GPU profile matching a CUDA device name (nearest by memory among a family)."""
    name = device_name.lower()
    if "h200" in name:
        return "h200-141gb"
    if "h100" in name or "h800" in name or "gh200" in name:
        return "h100-80gb"
    if "a100" in name or "a800" in name:
        return "a100-80gb" if memory_gib > 60 else "a100-40gb"
    return min(GPU_PROFILES, key=lambda key: abs(GPU_PROFILES[key].memory_gib - memory_gib))


def _initialise(torch) -> None:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)


def _build(torch, layers: int, hidden: int, heads: int):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs as specs
    from megatron.core.transformer.transformer_config import TransformerConfig

    from nemo_launcher.jobs.core.transformer import transformer_engine_available

    if transformer_engine_available():
        spec, engine = specs.get_gpt_layer_with_transformer_engine_spec(), "Transformer Engine"
    else:
        spec, engine = specs.get_gpt_layer_local_spec(), "megatron-core local"
    config = TransformerConfig(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=torch.float32,
        bf16=False,  # fp32 weights; the forward and backward run under bf16 autocast
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=VOCAB,
        max_sequence_length=SEQUENCE,
        position_embedding_type="learned_absolute",
        share_embeddings_and_output_weights=True,
    )
    return model.cuda(), engine


def measure(torch, name: str, steps: int) -> dict:
    layers, hidden, heads, micro_batch = SHAPES[name]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, engine = _build(torch, layers, hidden, heads)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, 50257, (micro_batch, SEQUENCE + 1), device="cuda")
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    positions = torch.arange(SEQUENCE, device="cuda").unsqueeze(0).expand(micro_batch, -1)
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(inputs, positions, None, labels=labels).float().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    step = sum(times[WARMUP_STEPS:]) / max(len(times) - WARMUP_STEPS, 1)
    peak = torch.cuda.max_memory_reserved() / 2**30
    del model, optimizer
    return {"step_s": step, "peak_gib": peak, "engine": engine, "loss": float(loss)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed here; run it where the job side and a GPU are", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here (torch sees no GPU); run it on a GPU machine", file=sys.stderr)
        return 1
    device = torch.cuda.get_device_name()
    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    profile = profile_for(device, memory_gib)
    peak = peak_bf16_flops(device) or GPU_PROFILES[profile].peak("bf16")
    print(f"{device} ({memory_gib:.0f} GiB), bf16 peak {peak / 1e12:.0f} TFLOP/s, predicted with profile {profile}")
    _initialise(torch)
    header = f"{'shape':10} {'':9} {'step s':>8} {'tokens/s':>10} {'MFU':>6} {'memory GiB':>10}"
    print(header)
    for name in SHAPES:
        est = estimate_job(stage_section(name, args.steps), profile)
        measured = measure(torch, name, args.steps)
        tokens = est.layout.gbs * SEQUENCE
        mfu = est.flops_per_step / (measured["step_s"] * peak)
        print(
            f"{name:10} {'measured':9} {measured['step_s']:8.4f} {tokens / measured['step_s']:10,.0f} {mfu:6.1%} "
            f"{measured['peak_gib']:10.1f}  ({measured['engine']}, loss {measured['loss']:.2f})"
        )
        print(
            f"{'':10} {'predicted':9} {est.step_time_s:8.4f} {est.tokens_per_s:10,.0f} {est.mfu:6.1%} "
            f"{est.memory_per_gpu_gib:10.1f}  (step time error {est.step_time_s / measured['step_s'] - 1:+.0%}, "
            f"{est.parameters / 1e6:.0f}M parameters)"
        )
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
