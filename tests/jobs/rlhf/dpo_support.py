"""The resolved `rlhf_dpo` section of the DPO tests (tiny SFT policy, tiny preference set, CPU) and runs of the two
DPO programs: the reference job and the trainer.

    section = dpo_section(rlhf_sft_nemo, preference_dir, work, reference_dir)
    run_dpo("rlhf_dpo_reference", section, work)        # then run_dpo("rlhf_dpo", section, work)
"""

import re

from ..sft_support import run_tuning

# Every validation pair at each validation: 64 pairs in 4 global batches of 16.
GLOBAL_BATCH = 16
VALIDATION_BATCHES = 4


def dpo_section(nemo: str, data_dir, log_dir, reference_dir, **model_overrides) -> dict:
    """32 steps of 16 pairs (8 per micro-batch), beta 0.1, validation at steps 16 and 32, a checkpoint every 8."""
    section = {
        "run": {"name": "dpo_tiny", "results_dir": str(log_dir), "time_limit": "0:30:00", "task_name": "dpo"},
        "trainer": {
            "num_nodes": 1,
            "devices": 1,
            "accelerator": "cpu",
            "precision": 32,
            "max_steps": 32,
            "log_every_n_steps": 1,
            "val_check_interval": 16,
            "limit_val_batches": VALIDATION_BATCHES,
            "gradient_clip_val": 1.0,
        },
        "exp_manager": {
            "explicit_log_dir": str(log_dir),
            "name": "megatron_gpt_dpo",
            "checkpoint_callback_params": {"every_n_train_steps": 8, "save_top_k": 2},
        },
        "model": {
            "restore_from_path": nemo,
            "global_batch_size": GLOBAL_BATCH,
            "micro_batch_size": 8,
            "seed": 1234,
            "dpo": {"ref_policy_kl_penalty": 0.1},
            "reference": {"output_dir": str(reference_dir), "micro_batch_size": 16},
            "data": {"data_dir": str(data_dir), "max_seq_length": 64},
            "optim": {
                "name": "adamw",
                "lr": 1.0e-3,
                "weight_decay": 0.0,
                "betas": [0.9, 0.98],
                "sched": {"name": "CosineAnnealing", "warmup_steps": 2, "constant_steps": 0, "min_lr": 1.0e-4},
            },
        },
    }
    section["model"].update(model_overrides)
    return section


def run_dpo(program: str, section: dict, work, processes: int = 1, expect_rc: int = 0):
    """nemo_launcher.jobs.gpt.<program> on the section as the launcher would run it; the CompletedProcess."""
    return run_tuning(program, section, work, processes=processes, expect_rc=expect_rc)


def validation_figures(stdout: str) -> dict[int, dict[str, float]]:
    """step -> the figures of its `validation step=N ...` line (val_loss, preference_accuracy, reward_margin, ...)."""
    found = {}
    for match in re.finditer(r"^validation step=(\d+) (.*)$", stdout, re.M):
        found[int(match.group(1))] = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[0-9.]+)", match.group(2))}
    return found
