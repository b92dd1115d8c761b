"""Fixtures for the fine-tuning, LoRA and deployment tests: a tiny GPT saved straight to a `.nemo` (no
training run), a small question/answer jsonl, the resolved `fine_tuning` / `peft` sections as the
launcher would write them (trainer on the CPU, a few steps, a checkpoint every 8), and runs of the programs."""

import copy
import json
from pathlib import Path

import pytest

from .data_support import tiny_bpe_files  # noqa: F401  (fixture)
from .gpt_models import model_section, random_model

COLORS = ["red", "blue", "green", "yellow", "black", "white", "purple", "orange"]
TEMPLATE = "{input}\nAnswer: {output}"
# Rows of the tiny models' embedding and output layer: the tiny BPE's 2,048 tokens are a multiple of 128 x TP for
# TP 1 and 2, so megatron pads nothing. It must be passed to random_model, whose default is GPT-2's padded 50,304:
# a .nemo's loader takes the size from the embedding it finds, so a wrong one would pass unnoticed and bring the
# large output layer back.
TINY_BPE_VOCAB = 2048


@pytest.fixture(scope="session")
def tiny_nemo(tmp_path_factory, tiny_bpe_files):  # noqa: F811
    """A random 2-layer GPT (hidden 64, 64 positions) as a TP=1 .nemo; returns its path. Its tokenizer is the
    2,048-token tiny BPE in GPT-2's format: with GPT-2's 50,257 tokens the output layer would dominate every step."""
    from nemo_launcher.jobs.core.nemo_archive import save_nemo

    section = model_section(
        "classic",
        *tiny_bpe_files,
        encoder_seq_length=64,
        max_position_embeddings=64,
        init_method_std=0.02,
        data={"seq_length": 64, "num_workers": 0},
    )
    path = tmp_path_factory.mktemp("tiny_gpt") / "megatron_gpt.nemo"
    save_nemo(path, section, random_model(section, TINY_BPE_VOCAB).state_dict())
    return str(path)


@pytest.fixture(scope="session")
def sharp_nemo(tmp_path_factory, tiny_bpe_files):  # noqa: F811
    """tiny_nemo with large random weights (init std 0.2): its logits span a wide range, so a frozen copy can be
    steered to confident answers by prompts, adapters or IA3 (tiny_nemo's stay near uniform whatever they do), and
    its answers depend on the prompt and on the method's tensors."""
    from nemo_launcher.jobs.core.nemo_archive import save_nemo

    section = model_section(
        "classic",
        *tiny_bpe_files,
        encoder_seq_length=64,
        max_position_embeddings=64,
        data={"seq_length": 64, "num_workers": 0},
    )
    path = tmp_path_factory.mktemp("sharp_gpt") / "megatron_gpt.nemo"
    save_nemo(path, section, random_model(section, TINY_BPE_VOCAB).state_dict())
    return str(path)


@pytest.fixture(scope="session")
def qa_jsonl(tmp_path_factory):
    """64 questions whose answer is a color named in the question."""
    path = tmp_path_factory.mktemp("qa") / "colors.jsonl"
    with open(path, "w") as handle:
        for i in range(64):
            color = COLORS[i % len(COLORS)]
            handle.write(
                json.dumps(
                    {
                        "input": f"In picture {i} the sky is {color}. What color is the sky?",
                        "output": color,
                        "answers": [color, f"{color} sky"],
                    }
                )
                + "\n"
            )
    return str(path)


def sft_section(nemo: str, data: str, log_dir: str, **model_overrides) -> dict:
    """A resolved fine_tuning section for the tiny model: 16 steps of 8 samples on the CPU."""
    dataset = {"file_names": [data], "prompt_template": TEMPLATE, "max_seq_length": 64}
    section = {
        "run": {"name": "colors_tiny", "results_dir": log_dir, "time_limit": "0:30:00", "task_name": "colors"},
        "trainer": {
            "num_nodes": 1,
            "devices": 1,
            "accelerator": "cpu",
            "precision": 32,
            "max_steps": 16,
            "log_every_n_steps": 4,
            "val_check_interval": 8,
            "limit_val_batches": 1,
            "gradient_clip_val": 1.0,
        },
        "exp_manager": {
            "explicit_log_dir": log_dir,
            "name": "megatron_gpt_sft",
            "checkpoint_callback_params": {"every_n_train_steps": 8, "save_top_k": 2},
        },
        "model": {
            "restore_from_path": nemo,
            "global_batch_size": 8,
            "micro_batch_size": 4,
            "seed": 1234,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
            "answer_only_loss": True,
            "optim": {
                "name": "adamw",
                "lr": 2.0e-3,
                "weight_decay": 0.0,
                "betas": [0.9, 0.98],
                "sched": {"name": "CosineAnnealing", "warmup_steps": 2, "constant_steps": 0, "min_lr": 1.0e-4},
            },
            "data": {"train_ds": dict(dataset), "validation_ds": dict(dataset)},
        },
    }
    section["model"].update(copy.deepcopy(model_overrides))
    return section


def lora_section(nemo: str, data: str, log_dir: str, **lora_overrides) -> dict:
    section = sft_section(nemo, data, log_dir)
    section["exp_manager"]["name"] = "megatron_gpt_peft_lora"
    section["model"]["optim"]["lr"] = 2.0e-2
    lora = {"adapter_dim": 4, "alpha": 8, "adapter_dropout": 0.0, "target_modules": ["all"]}
    lora.update(lora_overrides)
    section["model"]["peft"] = {"peft_scheme": "lora", "merge": True, "lora_tuning": lora}
    return section


def run_tuning(program: str, section: dict, work, processes: int = 1, expect_rc: int = 0, family: str = "gpt"):
    """Writes the resolved section to <work>/<program>.yaml and runs nemo_launcher.jobs.<family>.<program> on it as
    the launcher would (torchrun for several processes); returns the CompletedProcess."""
    import yaml

    from .gpt_train_support import run_training

    config = Path(work) / f"{program}.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(section))
    return run_training(
        config,
        processes=processes,
        expect_rc=expect_rc,
        timeout=600,
        program=(f"nemo_launcher.jobs.{family}.{program}",),
    )


def start_tuning(program: str, section: dict, work, log, family: str = "gpt"):
    """The program in the background (for kill -9 tests), its output in `log`."""
    import subprocess

    import yaml

    from .gpt_train_support import REPO, command, environment

    config = Path(work) / f"{program}.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(section))
    handle = open(log, "w")
    return subprocess.Popen(
        command(config, program=(f"nemo_launcher.jobs.{family}.{program}",), warm=False),
        cwd=REPO,
        env=environment(),
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
    )


def rerun_after_kill_9(program: str, section: dict, work, kill_after: int, family: str = "gpt", result=None) -> str:
    """Starts the program, kills it (SIGKILL) once step-<kill_after> is checkpointed and before it ends, runs it again
    on the same folder and returns the rerun's stdout, which must say it resumed from that checkpoint. `result`: the
    file written at the last step (default: model.nemo_path)."""
    import time

    work = Path(work)
    marker = work / "checkpoints" / f"step-{kill_after}" / "COMPLETE"
    process = start_tuning(program, section, work, work / "killed.log", family=family)
    try:
        deadline = time.monotonic() + 400
        while not marker.exists():
            assert process.poll() is None, (work / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"no checkpoint at step {kill_after} in time"
            time.sleep(0.02)
        process.kill()  # SIGKILL: nothing runs after this, not even our handlers
    finally:
        process.wait()
    last = section["trainer"]["max_steps"]
    assert not (work / "checkpoints" / f"step-{last}" / "COMPLETE").exists(), "killed too late to test a resume"
    assert not Path(result or section["model"]["nemo_path"]).exists(), "the result is written at the last step only"
    resumed = run_tuning(program, section, work, family=family).stdout
    assert f"resuming from {work / 'checkpoints' / f'step-{kill_after}'}" in resumed
    return resumed


def assert_same_tensors(ours: dict, theirs: dict, atol: float = 0.0) -> None:
    """The same names, and tensors bit-identical (atol 0) or within atol of each other."""
    import torch

    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key].equal(theirs[key]) if atol == 0.0 else torch.allclose(ours[key], theirs[key], atol=atol), key
