"""The public face of the performance model (nemo_launcher/contract/performance): what the plan, the ledger, the
`estimate` command and the AutoConfigurator read from it.

    python3 -m pytest tests/contract/test_performance_estimate.py
"""

import subprocess
import sys

import pytest

from nemo_launcher.contract.performance import GPU_PROFILES, Estimate, Layout, cpu_profile, estimate_job, score_layouts
from nemo_launcher.contract.performance.estimate import model_to_count

REQUIRED_KEYS = {
    "job",
    "parameters",
    "weights_and_optimizer_gib",
    "activations_gib",
    "memory_per_gpu_gib",
    "gpu_memory_gib",
    "flops_per_step",
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "days_to_train",
    "gpu_hours",
    "cost",
}


def gpt_stage(layers=24, hidden=4096, heads=32, tp=1, pp=1, mbs=4, gbs=2048, nodes=16, **model):
    """A resolved GPT training section as the launcher writes it, with the keys the model reads."""
    return {
        "run": {"name": f"gpt_{layers}x{hidden}"},
        "trainer": {"num_nodes": nodes, "devices": 8, "precision": "bf16", "max_steps": 75000},
        "model": {
            "micro_batch_size": mbs,
            "global_batch_size": gbs,
            "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": pp,
            "encoder_seq_length": 2048,
            "max_position_embeddings": 2048,
            "num_layers": layers,
            "hidden_size": hidden,
            "ffn_hidden_size": 4 * hidden,
            "num_attention_heads": heads,
            "activations_checkpoint_granularity": "selective",
            "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"},
            "optim": {"name": "distributed_fused_adam"},
            **model,
        },
    }


def test_the_estimate_of_gpt_5b_carries_every_key_the_plan_prints():
    est = estimate_job(gpt_stage(), gpu_type="a100-80gb")
    assert isinstance(est, Estimate)
    record = est.as_json()
    assert REQUIRED_KEYS <= set(record)
    # 24 x (12 h^2 + 13 h) + 50304 x h (GPT-2's 50257 tokens padded to 128) + 2048 x h (positions) + 2 h (final norm)
    # = 4,833,116,160 + 206,045,184 + 8,388,608 + 8,192
    assert record["parameters"] == 5_047_558_144
    assert record["job"] == "gpt_24x4096"
    assert record["gpu_memory_gib"] == 80.0
    assert record["cost"] is None
    assert est.fits
    # model FLOPs: 3 x forward; the logits 2 h V per token and 4 s h attention per layer on top of 2 per weight
    per_token = 3 * (24 * (2 * 12 * 4096**2 + 4 * 2048 * 4096) + 2 * 4096 * 50304)
    assert record["flops_per_step"] == pytest.approx(per_token * 2048 * 2048, rel=1e-12)
    assert record["days_to_train"] == pytest.approx(75000 * est.step_time_s / 86400, rel=1e-3)
    assert record["gpu_hours"] == pytest.approx(record["days_to_train"] * 24 * 128, rel=1e-3)
    assert 0.0 < record["mfu"] < 1.0


def test_a_price_gives_a_cost_and_a_faster_gpu_a_shorter_step():
    a100 = estimate_job(gpt_stage(), "a100-80gb", gpu_hour_price=2.0)
    h100 = estimate_job(gpt_stage(), "h100-80gb", gpu_hour_price=2.0)
    assert a100.cost == pytest.approx(a100.gpu_hours * 2.0, rel=1e-12)
    assert a100.as_json()["cost"] == round(a100.cost, 2)
    assert h100.step_time_s < a100.step_time_s
    assert set(GPU_PROFILES) == {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb"}


def test_a_model_too_large_for_its_gpus_gets_its_breakdown_and_the_changes_that_fit_it():
    est = estimate_job(gpt_stage(layers=96, hidden=12288, heads=96, mbs=1, nodes=16), "a100-80gb")
    assert not est.fits
    lines = est.memory_breakdown_lines()
    assert lines[0].startswith("weights, gradients and optimizer state: ")
    assert lines[-1].endswith("GiB per GPU of 80.0 GiB (a100-80gb)")
    # No single change fits 175B on TP 1 x PP 1: one combination does, the largest saving first.
    assert est.fixes() == [
        "raise model.tensor_model_parallel_size to 8 and raise model.pipeline_model_parallel_size to 4"
    ]
    assert estimate_job(gpt_stage(layers=96, hidden=12288, heads=96, mbs=1, nodes=16, tp=8, pp=4)).fits
    # A model one change away from fitting gets every single change that fits it.
    near = estimate_job(gpt_stage(mbs=8, activations_checkpoint_granularity=None), "a100-80gb")
    assert not near.fits
    assert near.fixes() == [
        "set model.activations_checkpoint_granularity=full with model.activations_checkpoint_method=uniform and "
        "model.activations_checkpoint_num_layers=1",
        "raise model.tensor_model_parallel_size to 2",
        "lower model.micro_batch_size to 4",
        "raise model.pipeline_model_parallel_size to 2",
    ]
    # With a fused attention kernel selective recomputation saves nothing, so it is not offered; a job that fits
    # needs no fix.
    assert estimate_job(gpt_stage(mbs=4), "a100-80gb").fixes() == []


def test_an_unknown_gpu_type_is_a_value_error_that_lists_the_known_ones():
    with pytest.raises(ValueError, match="a100-80gb"):
        estimate_job(gpt_stage(), gpu_type="a100-90gb")


def test_a_model_section_without_a_transformer_has_no_estimate():
    stage = {"run": {"name": "vae"}, "trainer": {}, "model": {"first_stage_config": {"embed_dim": 4}}}
    assert estimate_job(stage) is None


def test_score_layouts_gives_one_estimate_per_layout_in_order():
    layouts = [Layout(tp=tp, pp=pp, mbs=mbs, gbs=2048, nodes=16) for tp in (1, 2, 4) for pp in (1, 2) for mbs in (1, 2)]
    scored = score_layouts(gpt_stage(), layouts, "a100-80gb")
    assert [est.layout for est in scored] == layouts
    # more tensor parallelism: fewer weights per GPU
    by_tp = {est.layout.tp: est.weights_and_optimizer_gib for est in scored if est.layout.pp == 1}
    assert by_tp[1] > by_tp[2] > by_tp[4]


def test_the_performance_model_imports_no_torch_and_no_launcher():
    code = (
        "import sys, nemo_launcher.contract.performance; "
        "bad = [m for m in ('torch', 'hydra', 'omegaconf', 'nemo_launcher.launch') if m in sys.modules]; "
        "print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_experts_exchange_their_tokens_over_expert_parallel_ranks():
    moe = gpt_stage(layers=32, hidden=4096, heads=32, mbs=1, gbs=1, nodes=1, num_moe_experts=8, moe_router_topk=2)
    moe["model"] |= {"expert_model_parallel_size": 8, "ffn_hidden_size": 14336, "activation": "fast-swiglu"}
    moe["trainer"]["devices"] = 8
    est = estimate_job(moe, "a100-80gb")
    assert est.layout.micro_batches == 1 and est.layout.ep == 8
    # four all-to-alls a layer (dispatch and combine, forward and backward) of top-k x s x b x h 16-bit values,
    # 7/8 of them leaving each rank, over NVLink at 0.6 of 300 GB/s
    per_layer = 4 * 2 * 2 * 2048 * 4096
    assert est.time.expert_parallel_s == pytest.approx(32 * per_layer * 7 / 8 / (0.6 * 300e9), rel=1e-12)
    dense = estimate_job(gpt_stage(layers=32, hidden=4096, heads=32, mbs=1, gbs=1, nodes=1), "a100-80gb")
    assert dense.time.expert_parallel_s == 0.0


def test_a_cpu_profile_counts_each_operations_dispatch_and_each_collectives_latency():
    tiny = gpt_stage(layers=2, hidden=64, heads=4, tp=2, mbs=2, gbs=8, nodes=1)
    tiny["trainer"]["devices"] = 2
    quiet = cpu_profile(2e10, 16.0, processes_per_node=2, op_overhead_s=0.0, collective_latency_s=0.0)
    busy = cpu_profile(2e10, 16.0, processes_per_node=2, op_overhead_s=1e-3, collective_latency_s=1e-2)
    fast, slow = estimate_job(tiny, quiet), estimate_job(tiny, busy)
    micro_batches = 8 // (2 * 1)  # global batch / (micro batch x one data-parallel rank)
    # 25 operations a layer forward, x3 with the backward; 4 TP collectives a layer; 2 layers; 4 micro-batches
    assert slow.time.compute_s - fast.time.compute_s == pytest.approx(micro_batches * 3 * 25 * 2 * 1e-3, rel=1e-9)
    assert slow.time.tensor_parallel_s - fast.time.tensor_parallel_s == pytest.approx(micro_batches * 4 * 2 * 1e-2)
    assert fast.overhead_gib == 0.0  # a CPU process holds no CUDA context


def test_no_layout_is_predicted_faster_than_the_devices_best_multiply():
    """MFU counts model FLOPs only, so it can never pass the efficiency of the largest multiply (context
    parallelism splits a sequence's queries, while each still attends to every key)."""
    stage = gpt_stage(layers=32, hidden=4096, heads=32, encoder_seq_length=32768, max_position_embeddings=32768)
    layouts = [
        Layout(tp=tp, cp=cp, mbs=1, gbs=256, nodes=16, sequence_parallel=tp > 1, recompute=recompute)
        for tp in (1, 2, 4, 8)
        for cp in (1, 2, 4, 8)
        for recompute in (None, "selective", "full")
    ]
    for gpu in ("a100-80gb", "h100-80gb"):
        top = GPU_PROFILES[gpu].matrix_efficiency[-1][1]
        for est in score_layouts(stage, layouts, gpu):
            assert 0.0 < est.mfu <= top, (gpu, est.layout)


def fine_tuning_stage(restore_from_path: str, **model) -> dict:
    """A fine-tuning section as conf/_family/gpt3_sft.yaml resolves: the model it starts from, not its sizes."""
    return {
        "run": {"name": "squad_gpt3_5b"},
        "trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16", "max_steps": 1000},
        "model": {
            "restore_from_path": restore_from_path,
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 1,
            "global_batch_size": 32,
            "micro_batch_size": 4,
            "optim": {"name": "fused_adam"},
            **model,
        },
    }


def test_a_fine_tuning_job_is_counted_with_the_model_it_starts_from(tmp_path):
    import io
    import tarfile

    import yaml

    from nemo_launcher.contract.model_facts import read_nemo_config

    base = gpt_stage()["model"]
    archive = tmp_path / "megatron_gpt.nemo"
    assert estimate_job(fine_tuning_stage(str(archive))) is None  # no sizes in the section: nothing to count
    from_pipeline = estimate_job(fine_tuning_stage(str(archive)), base_model=base)
    assert from_pipeline.parameters == 5_047_558_144 + 128 * 4096  # TP 2 pads GPT-2's vocabulary to 50432 rows
    assert (from_pipeline.layout.tp, from_pipeline.layout.mbs, from_pipeline.layout.gbs) == (2, 4, 32)
    # inherited from the model it starts from: selective recomputation
    assert from_pipeline.layout.recompute == "selective"
    # a .nemo's model_config.yaml is the training model section: the same estimate
    with tarfile.open(archive, "w") as tar:
        text = yaml.safe_dump(base).encode()
        member = tarfile.TarInfo("./model_config.yaml")
        member.size = len(text)
        tar.addfile(member, io.BytesIO(text))
    from_file = estimate_job(fine_tuning_stage(str(archive)), base_model=read_nemo_config(archive))
    assert from_file.as_json() == from_pipeline.as_json()


def test_a_tuning_job_runs_at_its_training_set_length_not_the_pretraining_one():
    base = {**gpt_stage()["model"], "encoder_seq_length": 8192}
    tuned = fine_tuning_stage("x.nemo", data={"train_ds": {"max_seq_length": 2048}})
    assert model_to_count(tuned, base)["encoder_seq_length"] == 2048
    assert model_to_count(fine_tuning_stage("x.nemo"), base)["encoder_seq_length"] == 8192  # no length of its own
    short, long = estimate_job(tuned, base_model=base), estimate_job(fine_tuning_stage("x.nemo"), base_model=base)
    assert short.activations_gib < long.activations_gib / 3


def test_peft_keeps_the_frozen_weights_only_and_skips_their_gradients():
    full = estimate_job(fine_tuning_stage("x.nemo"), base_model=gpt_stage()["model"])
    peft = estimate_job(fine_tuning_stage("x.nemo", peft={"peft_scheme": "lora"}), base_model=gpt_stage()["model"])
    assert peft.layout.frozen_base and not full.layout.frozen_base
    # 2 bytes a frozen 16-bit weight on each of TP 2's halves, against 18 with gradients, master copy and moments
    assert peft.weights_and_optimizer_gib == pytest.approx(full.weights_and_optimizer_gib * 2 / 18, rel=1e-12)
    # no weight gradients: two forward passes' worth of work instead of three
    assert peft.flops_per_step == pytest.approx(full.flops_per_step * 2 / 3, rel=1e-12)
    assert peft.time.data_parallel_s == 0.0 and peft.time.optimizer_s == 0.0
    assert peft.step_time_s < full.step_time_s
