"""What the trainer builds from resolved GPT training sections, as JSON: the megatron-core configs and the
trainer's own objects, on the GPU path (on_gpu=True: no CUDA is touched while building configs).

    python3 tests/jobs/reference_objects.py cases.json objects.json     # cases: {case id: resolved section}

tests/launch/test_reference_keys.py runs it once for all its cases, so the launch tests never import torch.
"""

import json
import logging
import sys
import types
from pathlib import Path

_FIELDS = {
    "transformer": (
        "context_parallel_size",
        "apply_query_key_layer_scaling",
        "batch_p2p_comm",
        "batch_p2p_sync",
        "bias_activation_fusion",
        "bias_dropout_fusion",
        "gradient_accumulation_fusion",
        "fp32_residual_connection",
        "fp8_wgrad",
        "tp_comm_overlap",
        "tp_comm_atomic_ag",
        "tp_comm_atomic_rs",
    ),
    "local_apex": ("masked_softmax_fusion", "persist_layer_norm"),
    "ddp": (
        "grad_reduce_in_fp32",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "use_distributed_optimizer",
        "bucket_size",
        "average_in_collective",
        "use_megatron_fsdp",
        "data_parallel_sharding_strategy",
    ),
    "optimizer": ("hysteresis", "initial_loss_scale", "loss_scale_window", "overlap_param_gather"),
}


def objects(section: dict) -> dict:
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
    from nemo_launcher.jobs.core import transformer as core_transformer
    from nemo_launcher.jobs.core.optim import ddp_config, optimizer_config, use_distributed_optimizer
    from nemo_launcher.jobs.core.parts import parallel_sizes, prepare_layers
    from nemo_launcher.jobs.core.recipe import ChunkStage
    from nemo_launcher.jobs.core.step_hooks import GarbageCollection, NsysCapture, StepTimer, step_hooks
    from nemo_launcher.jobs.core.transformer import userbuffer_settings
    from nemo_launcher.jobs.gpt.data import gpt_dataset_settings
    from nemo_launcher.jobs.gpt.model import gpt_model_settings, transformer_config

    cfg = TrainingConfig.from_dict(section)
    precision = cfg.trainer.precision_name()
    found = {}
    te = transformer_config(cfg.model, precision, on_gpu=True, use_te=True)
    found["transformer"] = {name: getattr(te, name) for name in _FIELDS["transformer"]}
    with_apex = core_transformer.apex_available
    core_transformer.apex_available = lambda: True  # a GPU node with Apex, where the local spec uses its kernels
    try:
        local = transformer_config(cfg.model, precision, on_gpu=True, use_te=False)
    finally:
        core_transformer.apex_available = with_apex
    found["local_apex"] = {name: getattr(local, name) for name in _FIELDS["local_apex"]}
    distributed = use_distributed_optimizer(cfg, on_gpu=True)
    ddp = ddp_config(cfg, precision, 8, on_gpu=True, distributed=distributed)
    found["ddp"] = {name: getattr(ddp, name) for name in _FIELDS["ddp"]}
    optimizer = optimizer_config(cfg, precision, distributed, ddp.overlap_param_gather)
    found["optimizer"] = {name: getattr(optimizer, name) for name in _FIELDS["optimizer"]}
    found["parallel"] = parallel_sizes(cfg.model, on_gpu=True)
    found["gpt_model"] = {
        "fp16_lm_cross_entropy": gpt_model_settings(cfg.model, ChunkStage(None, True, True))["fp16_lm_cross_entropy"]
    }
    found["dataset"] = {"mmap_bin_files": gpt_dataset_settings(cfg, [1.0, "/data/x"])["mmap_bin_files"]}
    found["userbuffers"] = (
        {k: v for k, v in userbuffer_settings(cfg.model, te).items() if k != "dtype"} if te.tp_comm_overlap else None
    )
    prepare_layers(cfg.model, types.SimpleNamespace(apply_query_key_layer_scaling=False, tp_comm_overlap=False), False)
    found["megatron_log_level"] = logging.getLogger("megatron.core").level
    parts = types.SimpleNamespace(cfg=cfg, on_gpu=True, placement=types.SimpleNamespace(rank=0))
    hooks = {}
    for hook in step_hooks(parts):
        if isinstance(hook, StepTimer):
            hooks["timer"] = {"sync_cuda": hook.sync_cuda, "buffer_size": hook.durations.maxlen}
        elif isinstance(hook, GarbageCollection):
            hooks["gc_interval"] = hook.interval
        elif isinstance(hook, NsysCapture):
            hooks["nsys"] = {"start_step": hook.start_step, "end_step": hook.end_step, "gen_shape": hook.gen_shape}
    found["hooks"] = hooks
    return found


def main(source: str, target: str) -> int:
    from nemo_launcher.contract.binding import JobConfigError

    results = {}
    for case, section in json.loads(Path(source).read_text()).items():
        try:
            results[case] = objects(section)
        except JobConfigError as error:
            results[case] = {"error": str(error)}
    Path(target).write_text(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
