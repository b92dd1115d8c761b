"""Every GPT training key of the reference launcher that a migrating user types (notes/reference-gpt3-keys.md)
either binds and reaches what the trainer builds, or is refused at launch (exit 2) with one line saying why.

Each key is copied with the reference's value into an override on gpt3/5b and gpt3/175b. A mapped key is then
set to a value that shows its effect, and the object the trainer builds from the resolved section is checked
(megatron-core's TransformerConfig, DistributedDataParallelConfig and OptimizerConfig, initialize_model_parallel's
sizes, Transformer Engine's userbuffers settings, the trainer's step hooks, the rendered command and environment).
Those objects come from one subprocess (tests/jobs/reference_objects.py), so this process never imports torch.
"""

import json
import subprocess
import sys

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT
from nemo_launcher.launch.stage_config import stage_config

CKPT = "exp_manager.checkpoint_callback_params"
# The reference's gpt3/5b keys this project's config lacked, with the reference's values (Hydra override text).
REFERENCE_5B = {
    f"{CKPT}.always_save_nemo": "false",
    f"{CKPT}.filename": "'megatron_gpt--{val_loss:.2f}-{step}-{consumed_samples}'",
    f"{CKPT}.mode": "min",
    f"{CKPT}.model_parallel_size": "1",
    f"{CKPT}.monitor": "val_loss",
    f"{CKPT}.save_nemo_on_train_end": "false",
    "exp_manager.exp_dir": "null",
    "exp_manager.name": "megatron_gpt",
    "exp_manager.step_timing_kwargs.buffer_size": "5",
    "exp_manager.step_timing_kwargs.sync_cuda": "true",
    "model.activations_checkpoint_layers_per_pipeline": "null",
    "model.apex_transformer_log_level": "30",
    "model.apply_query_key_layer_scaling": "true",
    "model.batch_p2p_comm": "true",
    "model.bias_activation_fusion": "true",
    "model.bias_dropout_add_fusion": "true",
    "model.context_parallel_size": "1",
    "model.data.data_impl": "mmap",
    "model.data.skip_warmup": "true",
    "model.fp16_lm_cross_entropy": "false",
    "model.fp32_residual_connection": "false",
    "model.fp8_wgrad": "true",
    "model.fsdp": "false",
    "model.fsdp_grad_reduce_dtype": "32",
    "model.fsdp_sharded_checkpoint": "false",
    "model.fsdp_sharding_strategy": "full",
    "model.grad_allreduce_chunk_size_mb": "125",
    "model.grad_div_ar_fusion": "true",
    "model.gradient_accumulation_fusion": "true",
    "model.gradient_as_bucket_view": "true",
    "model.hysteresis": "2",
    "model.masked_softmax_fusion": "true",
    "model.mcore_gpt": "true",
    "model.megatron_amp_O2": "true",
    "model.native_amp_growth_interval": "1000",
    "model.native_amp_init_scale": "4294967296",
    "model.nsys_profile.enabled": "false",
    "model.nsys_profile.end_step": "10",
    "model.nsys_profile.gen_shape": "false",
    "model.nsys_profile.ranks": "[0]",
    "model.nsys_profile.start_step": "10",
    "model.nsys_profile.trace": "[nvtx,cuda]",
    "model.num_micro_batches_with_partial_activation_checkpoints": "null",
    "model.onnx_safe": "false",
    "model.optim.bucket_cap_mb": "400",
    "model.optim.contiguous_grad_buffer": "true",
    "model.optim.contiguous_param_buffer": "true",
    "model.optim.overlap_grad_sync": "true",
    "model.optim.overlap_param_sync": "true",
    "model.persist_layer_norm": "true",
    "model.post_process": "true",
    "model.pre_process": "true",
    "model.resume_from_checkpoint": "null",
    "model.sharp": "false",
    "model.sync_batch_comm": "false",
    "model.tokenizer.delimiter": "null",
    "model.tp_comm_atomic_ag": "false",
    "model.tp_comm_atomic_rs": "false",
    "model.ub_tp_comm_overlap": "false",
    "trainer.enable_checkpointing": "false",
    "trainer.logger": "false",
    "trainer.max_epochs": "null",
    "trainer.use_distributed_sampler": "false",
}
# The reference's gpt3/175b adds these (and sets batch_p2p_comm false, bucket_cap_mb 220).
REFERENCE_175B = {
    **REFERENCE_5B,
    "model.gc_interval": "100",
    "model.batch_p2p_comm": "false",
    "model.optim.bucket_cap_mb": "220",
    "model.ub_tp_comm_overlap_cfg": "{qkv_fprop:{method:ring_exchange,aggregate:false},"
    "fc2_dgrad:{method:pipeline,num_sm:4,cga_size:2,num_splits:4,set_sm_margin:true}}",
}

# Refused at the reference's value: key -> words of the one-line reason (per size where they differ).
REFUSED = {
    f"{CKPT}.filename": ("checkpoint folders are always step-<N>",),
    "exp_manager.name": ("NeMo names the folder under exp_dir", "explicit_log_dir"),
    f"{CKPT}.model_parallel_size@175b": ("must equal TP(8) x PP(16) = 128",),
    f"{CKPT}.mode": ("monitor: step keeps the newest checkpoints",),  # alone; with monitor: val_loss it binds
}
# Fixed keys: bound at the reference's value, refused at the other with the reason.
FIXED = {
    f"{CKPT}.always_save_nemo": ("true", "conversion stage"),
    f"{CKPT}.save_nemo_on_train_end": ("true", "conversion stage"),
    "exp_manager.exp_dir": ("/tmp/x", "explicit_log_dir"),
    "model.activations_checkpoint_layers_per_pipeline": ("2", "activations_checkpoint_num_layers"),
    "model.data.skip_warmup": ("false", "no warm-up"),
    "model.gradient_as_bucket_view": ("false", "view of its bucket"),
    "model.mcore_gpt": ("false", "megatron-core's GPTModel"),
    "model.megatron_amp_O2": ("false", "always O2"),
    "model.num_micro_batches_with_partial_activation_checkpoints": ("2", "no partial recompute"),
    "model.onnx_safe": ("true", "ONNX"),
    "model.optim.contiguous_grad_buffer": ("false", "contiguous"),
    "model.optim.contiguous_param_buffer": ("false", "contiguous"),
    "model.post_process": ("false", "pipeline stage"),
    "model.pre_process": ("false", "pipeline stage"),
    "model.tokenizer.delimiter": ("','", "tabular tokenizer"),
    "trainer.enable_checkpointing": ("true", "exp_manager"),
    "trainer.logger": ("true", "exp_manager"),
    "trainer.max_epochs": ("1", "trainer.max_steps"),
    "trainer.use_distributed_sampler": ("true", "data-parallel rank"),
    "model.data.data_impl": ("lazy", "choose one of mmap"),
}

UB = ["model.sequence_parallel=true", "model.ub_tp_comm_overlap=true"]
FSDP = ["model.fsdp=true", "model.fsdp_sharded_checkpoint=true"]
# Mapped keys: key -> [(sizes, overrides that show the effect, object path, expected)]. Object paths name what
# reference_objects.py builds, or "env"/"command"/"reads" (the launcher's job spec, computed here).
MAPPED = {
    f"{CKPT}.mode": [("5b 175b", [f"{CKPT}.monitor=val_loss", f"{CKPT}.mode=min"], "cfg.monitor", ["val_loss", "min"])],
    f"{CKPT}.monitor": [
        ("5b 175b", [f"{CKPT}.monitor=val_loss", f"{CKPT}.mode=min"], "cfg.monitor", ["val_loss", "min"])
    ],
    f"{CKPT}.model_parallel_size": [("5b", [f"{CKPT}.model_parallel_size=1"], "cfg.model_parallel_size", 1)],
    "exp_manager.step_timing_kwargs.buffer_size": [
        ("5b", ["exp_manager.step_timing_kwargs.buffer_size=7"], "hooks.timer.buffer_size", 7)
    ],
    "exp_manager.step_timing_kwargs.sync_cuda": [
        ("5b", ["exp_manager.step_timing_kwargs.sync_cuda=false"], "hooks.timer.sync_cuda", False)
    ],
    "model.apex_transformer_log_level": [("5b", ["model.apex_transformer_log_level=40"], "megatron_log_level", 40)],
    "model.apply_query_key_layer_scaling": [
        ("5b", ["trainer.precision=16"], "transformer.apply_query_key_layer_scaling", True),
        ("5b", [], "transformer.apply_query_key_layer_scaling", False),
    ],
    "model.batch_p2p_comm": [
        ("175b", ["model.batch_p2p_comm=false"], "transformer.batch_p2p_comm", False),
        ("175b", [], "transformer.batch_p2p_comm", True),
    ],
    "model.bias_activation_fusion": [
        ("5b", ["model.bias_activation_fusion=false"], "transformer.bias_activation_fusion", False),
        ("5b", [], "transformer.bias_activation_fusion", True),
    ],
    "model.bias_dropout_add_fusion": [
        ("5b", ["model.bias_dropout_add_fusion=false"], "transformer.bias_dropout_fusion", False)
    ],
    "model.context_parallel_size": [
        ("5b", ["model.context_parallel_size=2"], "transformer.context_parallel_size", 2),
        ("5b", ["model.context_parallel_size=2"], "parallel.context_parallel_size", 2),
    ],
    "model.data.data_impl": [("5b", [], "dataset.mmap_bin_files", True)],
    "model.fp16_lm_cross_entropy": [
        ("5b", ["model.fp16_lm_cross_entropy=true"], "gpt_model.fp16_lm_cross_entropy", True)
    ],
    "model.fp32_residual_connection": [
        ("5b", ["model.fp32_residual_connection=true"], "transformer.fp32_residual_connection", True)
    ],
    "model.fp8_wgrad": [("175b", ["model.fp8=true", "model.fp8_wgrad=false"], "transformer.fp8_wgrad", False)],
    "model.fsdp": [("5b", FSDP, "ddp.use_megatron_fsdp", True), ("5b", [], "ddp.use_megatron_fsdp", False)],
    "model.fsdp_grad_reduce_dtype": [
        ("5b", FSDP + ["model.fsdp_grad_reduce_dtype=bf16"], "ddp.grad_reduce_in_fp32", False)
    ],
    "model.fsdp_sharded_checkpoint": [("5b", FSDP, "ddp.use_megatron_fsdp", True)],
    "model.fsdp_sharding_strategy": [
        ("5b", FSDP + ["model.fsdp_sharding_strategy=grad"], "ddp.data_parallel_sharding_strategy", "optim_grads"),
        ("5b", FSDP, "ddp.data_parallel_sharding_strategy", "optim_grads_params"),
    ],
    # 126m: 5B with an optimizer that does not shard its state needs 115 GiB per GPU (the launch memory check).
    "model.grad_allreduce_chunk_size_mb": [
        (
            "126m",
            ["model.optim.name=fused_adam", "model.grad_allreduce_chunk_size_mb=64"],
            "ddp.bucket_size",
            64 * 2**18,
        )
    ],
    "model.grad_div_ar_fusion": [
        ("5b", ["model.grad_div_ar_fusion=false"], "ddp.average_in_collective", False),
        ("5b", [], "ddp.average_in_collective", True),
    ],
    "model.gradient_accumulation_fusion": [
        ("5b", ["model.gradient_accumulation_fusion=false"], "transformer.gradient_accumulation_fusion", False),
        ("5b", [], "transformer.gradient_accumulation_fusion", True),
    ],
    "model.hysteresis": [("5b", ["model.hysteresis=3"], "optimizer.hysteresis", 3)],
    "model.masked_softmax_fusion": [
        ("5b", [], "local_apex.masked_softmax_fusion", True),
        ("5b", ["model.masked_softmax_fusion=false"], "local_apex.masked_softmax_fusion", False),
    ],
    "model.native_amp_growth_interval": [
        ("5b", ["model.native_amp_growth_interval=500"], "optimizer.loss_scale_window", 500.0)
    ],
    "model.native_amp_init_scale": [
        ("5b", ["model.native_amp_init_scale=65536"], "optimizer.initial_loss_scale", 65536.0)
    ],
    "model.nsys_profile.enabled": [
        ("5b", ["model.nsys_profile.enabled=true"], "command.module", "nemo_launcher.jobs.common.nsys_profile")
    ],
    "model.nsys_profile.ranks": [
        ("5b", ["model.nsys_profile.enabled=true", "model.nsys_profile.ranks=[0,8]"], "command.ranks", "0,8")
    ],
    "model.nsys_profile.trace": [
        (
            "5b",
            ["model.nsys_profile.enabled=true", "model.nsys_profile.trace=[cuda,nvtx,osrt]"],
            "command.trace",
            "cuda,nvtx,osrt",
        )
    ],
    "model.nsys_profile.start_step": [
        (
            "5b",
            ["model.nsys_profile.enabled=true", "model.nsys_profile.start_step=3", "model.nsys_profile.end_step=6"],
            "hooks.nsys.start_step",
            3,
        )
    ],
    "model.nsys_profile.end_step": [
        ("5b", ["model.nsys_profile.enabled=true", "model.nsys_profile.end_step=12"], "hooks.nsys.end_step", 12)
    ],
    "model.nsys_profile.gen_shape": [
        ("5b", ["model.nsys_profile.enabled=true", "model.nsys_profile.gen_shape=true"], "hooks.nsys.gen_shape", True)
    ],
    "model.optim.bucket_cap_mb": [("175b", ["model.optim.bucket_cap_mb=220"], "ddp.bucket_size", 220 * 2**18)],
    "model.optim.overlap_grad_sync": [
        ("5b", ["model.optim.overlap_grad_sync=false"], "ddp.overlap_grad_reduce", False),
        ("5b", [], "ddp.overlap_grad_reduce", True),
    ],
    "model.optim.overlap_param_sync": [
        ("5b", [], "ddp.overlap_param_gather", True),
        ("5b", [], "optimizer.overlap_param_gather", True),
        ("5b", ["model.optim.overlap_param_sync=false"], "ddp.overlap_param_gather", False),
    ],
    "model.persist_layer_norm": [
        ("5b", [], "local_apex.persist_layer_norm", True),
        ("5b", ["model.persist_layer_norm=false"], "local_apex.persist_layer_norm", False),
    ],
    "model.resume_from_checkpoint": [
        ("5b", ["model.resume_from_checkpoint=/ckpt/step-100"], "reads", "/ckpt/step-100")
    ],
    "model.sharp": [("5b", ["model.sharp=true"], "parallel.use_sharp", True)],
    "model.sync_batch_comm": [
        ("175b", ["model.sync_batch_comm=true"], "transformer.batch_p2p_sync", True),
        ("175b", [], "transformer.batch_p2p_sync", False),
    ],
    "model.tp_comm_atomic_ag": [("175b", UB + ["model.tp_comm_atomic_ag=true"], "transformer.tp_comm_atomic_ag", True)],
    "model.tp_comm_atomic_rs": [("175b", UB + ["model.tp_comm_atomic_rs=true"], "transformer.tp_comm_atomic_rs", True)],
    "model.ub_tp_comm_overlap": [
        ("175b", UB, "transformer.tp_comm_overlap", True),
        ("175b", UB, "env.NVTE_FWD_LAYERNORM_SM_MARGIN", "0"),
        ("175b", UB, "userbuffers.shape", [2048, 12288]),
    ],
    "model.ub_tp_comm_overlap_cfg": [
        (
            "175b",
            UB + [f"model.ub_tp_comm_overlap_cfg={REFERENCE_175B['model.ub_tp_comm_overlap_cfg']}"],
            "userbuffers.ub_cfgs.fc2_dgrad.num_sm",
            4,
        ),
        (
            "175b",
            UB + [f"model.ub_tp_comm_overlap_cfg={REFERENCE_175B['model.ub_tp_comm_overlap_cfg']}"],
            "env.NVTE_BWD_LAYERNORM_SM_MARGIN",
            "4",
        ),
    ],
    "model.gc_interval": [("175b", ["model.gc_interval=100"], "hooks.gc_interval", 100)],
}
FIXED_OR_MAPPED_ELSEWHERE = {"exp_manager.exp_dir"}


def _launch_key(launch, tmp_path, size, key, value):
    return launch(["stages=[training]", f"training=gpt3/{size}", f"training.{key}={value}"], results=tmp_path / "r")


def test_every_key_of_the_note_is_mapped_fixed_or_refused():
    for key in REFERENCE_175B:
        assert key in MAPPED or key in FIXED or any(r.split("@")[0] == key for r in REFUSED), key


@pytest.mark.parametrize("size, key", [("5b", k) for k in REFERENCE_5B] + [("175b", k) for k in REFERENCE_175B])
def test_the_references_value_binds_or_is_refused_with_a_reason(size, key, launch, tmp_path):
    reference = REFERENCE_5B if size == "5b" else REFERENCE_175B
    code, out, err = _launch_key(launch, tmp_path, size, key, reference[key])
    words = REFUSED.get(f"{key}@{size}", REFUSED.get(key))
    if words is None:
        assert code == 0, err
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"Error: training.{key}"), err
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize("key", sorted(FIXED))
def test_a_fixed_key_at_another_value_is_refused_with_why(key, launch, tmp_path):
    value, words = FIXED[key]
    code, out, err = _launch_key(launch, tmp_path, "5b", key, value)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"Error: training.{key}="), err
    assert words in lines[0], lines[0]


CASES = [(key, i, *case) for key, cases in MAPPED.items() for i, case in enumerate(cases)]


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """{case id: (bound config, objects the trainer builds)} for every MAPPED case, from one subprocess."""
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig

    root = tmp_path_factory.mktemp("reference_keys")
    sections, bound = {}, {}
    for key, i, sizes, overrides, _, _ in CASES:
        for size in sizes.split():
            case = f"{key}#{i}@{size}"
            sections[case] = stage_config("training", f"gpt3/{size}", root / "data", root / "results", overrides)
            bound[case] = TrainingConfig.from_dict(sections[case])
    source, target = root / "cases.json", root / "objects.json"
    source.write_text(json.dumps(sections))
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests/jobs/reference_objects.py"), str(source), str(target)],
        check=True,
        cwd=REPO_ROOT,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)},
    )
    objects = json.loads(target.read_text())
    return {case: (bound[case], objects[case]) for case in sections}


def _launcher_objects(cfg):
    from nemo_launcher.contract.schemas.gpu_training import profiled_command, training_environment

    module, args = profiled_command(
        "nemo_launcher.jobs.gpt.train", ("--config", "c.yaml"), cfg.model.nsys_profile, "/logs"
    )
    command = {"module": module}
    if "--ranks" in args:
        command.update(ranks=args[args.index("--ranks") + 1], trace=args[args.index("--trace") + 1])
    params = cfg.exp_manager.checkpoint_callback_params
    return {
        "env": dict(training_environment(cfg)),
        "command": command,
        "reads": [path for _, path in cfg.reads()],
        "cfg": {"monitor": [params.monitor, params.mode], "model_parallel_size": params.model_parallel_size},
    }


@pytest.mark.parametrize("key, index, sizes, overrides, path, expected", CASES, ids=[f"{c[0]}#{c[1]}" for c in CASES])
def test_a_mapped_key_reaches_what_the_trainer_builds(key, index, sizes, overrides, path, expected, built):
    for size in sizes.split():
        cfg, found = built[f"{key}#{index}@{size}"]
        assert "error" not in found, found
        found = {**found, **_launcher_objects(cfg)}
        value = found
        for part in path.split("."):
            value = value[part]
        if path == "reads":
            assert expected in value
        else:
            assert value == expected, (size, path, value)
