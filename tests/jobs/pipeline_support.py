"""Real runs for the conversion and evaluation tests: the launcher plans the jobs (dry run: it writes each
job's resolved config where a submission would), then the tests run the job programs on those files the
way the scripts do (torchrun for several processes).

    work = plan_pipeline(tmp, ["stages=[training,conversion]", "training=gpt3/tiny", ...])
    run_job(work.configs["training"], module="nemo_launcher.jobs.gpt.train", processes=2)
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from . import warm_python

REPO = Path(__file__).resolve().parents[2]

# A 4-step run saving at steps 2 and 4: enough for "the newest complete checkpoint" to mean something.
SHORT_TRAINING = [
    "training.trainer.max_steps=4",
    "training.trainer.val_check_interval=2",
    "training.trainer.limit_val_batches=1",
    "training.trainer.limit_test_batches=0",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=2",
    "training.model.encoder_seq_length=32",
    "training.model.optim.sched.warmup_steps=1",
    'training.model.data.splits_string="90,5,5"',
]
# make_vocab_size_divisible_by for the tiny pipelines: the tiny BPE's 2,048 tokens padded to 2,112 rows at TP=1 and
# 2,304 at TP=2 (the default 128 would leave no padding rows, which GPT-2's 50,257 tokens always had).
TINY_VOCAB_DIVISOR = 192
# The `_improved` recipe with RMSNorm (the Llama-exportable variant) and grouped-query attention.
IMPROVED = [
    "training.model.activation=fast-swiglu",
    "training.model.position_embedding_type=rope",
    "training.model.bias=false",
    "training.model.share_embeddings_and_output_weights=false",
    "training.model.normalization=rmsnorm",
    "training.model.num_query_groups=2",
    "training.model.ffn_hidden_size=128",
]


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    base_results_dir: Path
    data_dir: Path
    configs: dict[str, Path]  # stage -> the <run.name>_hydra.yaml the launcher wrote


def build_data(data_dir: Path) -> None:
    """The tiny BPE (corpora/tiny_bpe: 2,048 tokens in GPT-2's file format, read as GPT2BPETokenizer) and a small
    indexed corpus (the first license files) under data_dir. The tests' tiny GPTs only need *a* GPT tokenizer; with
    GPT-2's 50,257 tokens most of each training step's CPU would go to the output layer and the softmax."""
    from nemo_launcher.jobs.common.sample_data import build_sample_data, tiny_bpe_files

    build_sample_data(data_dir, max_files=8, bpe_files=tiny_bpe_files())


def padded_vocab(vocab_size: int, multiple: int) -> int:
    """Rows of megatron's embedding and output layer: the vocabulary padded up to a multiple of
    make_vocab_size_divisible_by x TP."""
    return -(-vocab_size // multiple) * multiple


def prepare_data(choice: str, work: Path) -> Path:
    """Runs `data_preparation=<choice>` with the launcher on this machine (interactive), as a user would; returns the
    data_dir it filled (<work>/data)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    run = subprocess.run(
        [
            sys.executable,
            "main.py",
            "stages=[data_preparation]",
            f"data_preparation={choice}",
            "cluster_type=interactive",
            f"base_results_dir={work / 'results'}",
            f"data_dir={work / 'data'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return work / "data"


def plan_pipeline(work: Path, overrides: list[str], data_dir: Path) -> PlannedRun:
    from nemo_launcher.launch.pipeline import build_plan, write_plan
    from tests.launch.conftest import compose_config

    results = work / "results"
    argv = [f"base_results_dir={results}", f"data_dir={data_dir}", "cluster_type=interactive", *overrides]
    previous = os.environ.pop("NEMO_LAUNCHER_DEBUG", None)
    try:
        cfg, choices = compose_config(argv)
        plan = build_plan(cfg, choices)
        write_plan(plan, ["main.py", *argv])
    finally:
        if previous is not None:
            os.environ["NEMO_LAUNCHER_DEBUG"] = previous
    configs = {jobs[0].spec.stage: jobs[0].spec.files[0][0] for jobs in plan.jobs_by_stage}
    return PlannedRun(results, data_dir, configs)


def run_job(config: Path, module: str, processes: int = 1, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs a job program as its script would; fails the test with the program's output if it fails."""
    env, python = warm_python.environment(warm_python.job_environment(os.environ)), warm_python.interpreter()
    if processes > 1:
        command = [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={processes}",
            "-m",
            module,
            "--config",
            str(config),
        ]
    else:
        command = [python, "-u", "-m", module, "--config", str(config)]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(
            f"{module} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


def reference_logits(
    training_config: Path, checkpoint: Path, tokens_file: Path, out_file: Path, processes: int, family: str = "gpt"
) -> None:
    """Logits of the training checkpoint as the trainer itself builds and restores the model
    (see checkpoint_logits.py)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    args = [
        "-m",
        "tests.jobs.checkpoint_logits",
        str(training_config),
        str(checkpoint),
        str(tokens_file),
        str(out_file),
        family,
    ]
    env, python = warm_python.environment(env), warm_python.interpreter()
    prefix = (
        [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        if processes > 1
        else [python]
    )
    result = subprocess.run(prefix + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise AssertionError(f"checkpoint_logits failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
