"""Measures one setting of the AutoConfigurator's GPT inference search: batched generation from the search's `.nemo`.

    srun python3 -m nemo_launcher.jobs.autoconfig.inference_benchmark --manifest <r>/inference/inference_manifest.json
        (a Slurm array task: the setting is SLURM_ARRAY_TASK_ID)
    python3 -u -m nemo_launcher.jobs.autoconfig.inference_benchmark --manifest ... --item 3 --keep-going
        (interactive: the settings one after another in one job)

The setting's TP ranks are one torchrun this process starts on its node (every setting's job asks for one task, so
one Slurm array holds settings of any TP); TP 1 runs in this process. The model is the archive's GPTModel loaded at
the setting's TP (jobs/gpt/inference.py); batch_size prompts of input_len random token ids (drawn from the
benchmark's seed, the same prompts for every setting) each get output_len new tokens, greedy or sampled with top-k /
top-p from the same seed, with no early stop, so every setting does the same work. Like generate.py, each new token
reruns the whole sequence (no key/value cache). After one untimed forward (the first allocates), rank 0 writes to
the setting's own directory (contract/autoconfig_inference.py): the seconds for the whole batch (latency), for its
first new token, and generated tokens per second. The status files are the training candidates' (started, then
finished or failed, and any rank's reason), so the analysis never pairs numbers with settings by position. With
--keep-going a failure exits 0, so that the next setting of a sequential job still runs.
"""

import argparse
import os
import socket
import subprocess
import sys
import time
import traceback

from ...contract.autoconfig_inference import (
    RESULT_FILE,
    InferenceManifest,
    InferenceSetting,
    benchmark_problem,
    read_inference_manifest,
    setting_problem,
)
from ...contract.autoconfig_search import FAILURE_PREFIX, failures_in, write_status
from ...contract.model_facts import facts_of_model, read_nemo_config
from ..common.config import JobConfigError
from ..common.quiet import report_absent_accelerators, start_job
from .candidate import failure_reason, item_of, rank_from_env, utc_now

PROGRAM = "nemo_launcher.jobs.autoconfig.inference_benchmark"


def check_archive(manifest: InferenceManifest, setting: InferenceSetting) -> None:
    """The launcher's checks (contract/autoconfig_inference.py) against the archive this job opens."""
    config = read_nemo_config(manifest.nemo_file)
    facts = facts_of_model(config, manifest.nemo_file)
    (stack,) = facts.stacks
    groups = int(config.get("num_query_groups") or stack.heads)
    problem = setting_problem(setting.tp, setting.pp, stack.heads, groups)
    if problem:
        raise JobConfigError(f"{setting.name}: {problem}")
    bad = benchmark_problem(manifest.benchmark, int(config.get("max_position_embeddings") or 0) or None)
    if bad:
        key, value, fix = bad
        raise JobConfigError(f"benchmark.{key}={value!r}: {fix}")


def next_tokens(logits, topk: int, topp: float, generator):
    """The next token of every row: argmax without top-k/top-p, else a draw among the tokens they keep."""
    import torch

    if topk <= 1 and topp == 0.0:
        return logits.argmax(dim=-1)
    if topk > 1:
        kth = logits.topk(min(topk, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if topp > 0.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        probabilities = ordered.softmax(dim=-1)
        # A token goes when the likelier ones already hold topp; the likeliest always stays.
        drop = probabilities.cumsum(dim=-1) - probabilities >= topp
        logits = logits.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


def _full_vocab(logits):
    """With TP > 1 each rank holds a slice of the vocabulary: all ranks must pick from all of it, alike."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        return gather_from_tensor_model_parallel_region(logits)
    return logits


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(model, prompts, new_tokens: int, vocab_size: int, topk: int, topp: float, generator):
    """(new token ids [rows, new_tokens], seconds to the first new token, seconds for all of them)."""
    import torch

    device = prompts.device
    tokens, first_s = prompts, None
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(new_tokens):
            positions = torch.arange(tokens.shape[1], device=device).unsqueeze(0).expand_as(tokens)
            logits = _full_vocab(model(tokens, positions, None))[:, -1, :vocab_size].float()
            tokens = torch.cat([tokens, next_tokens(logits, topk, topp, generator).unsqueeze(1)], dim=1)
            if first_s is None:
                _synchronize(device)
                first_s = time.perf_counter() - start
        _synchronize(device)
    return tokens[:, prompts.shape[1] :], first_s, time.perf_counter() - start


def measure(manifest: InferenceManifest, setting: InferenceSetting) -> dict:
    """This rank's part of the setting's benchmark; what rank 0 records."""
    import torch

    from ..gpt.inference import load_gpt_from_nemo

    check_archive(manifest, setting)
    benchmark = manifest.benchmark
    model, tokenizer = load_gpt_from_nemo(manifest.nemo_file, setting.tp, setting.pp, precision=manifest.data_type)
    if manifest.data_type != "fp32":
        from megatron.core.transformer.module import Float16Module

        model = Float16Module(model.config, model)  # casts the inputs and logits at the edges, as serving.py does
    device = next(model.parameters()).device
    prompts_from = torch.Generator().manual_seed(benchmark.seed)
    shape = (setting.batch_size, benchmark.input_len)
    prompts = torch.randint(0, tokenizer.vocab_size, shape, generator=prompts_from).to(device)
    sampling = torch.Generator(device=device).manual_seed(benchmark.seed)
    # The first forward allocates and warms the kernels: leave it out of the timing.
    generate(model, prompts, 1, tokenizer.vocab_size, benchmark.topk, benchmark.topp, sampling)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    sampling.manual_seed(benchmark.seed)
    new, first_s, total_s = generate(
        model, prompts, benchmark.output_len, tokenizer.vocab_size, benchmark.topk, benchmark.topp, sampling
    )
    return {
        "tp": setting.tp,
        "pp": setting.pp,
        "batch_size": setting.batch_size,
        "input_len": benchmark.input_len,
        "output_len": benchmark.output_len,
        "latency_s": total_s,
        "first_token_latency_s": first_s,
        "tokens_per_s": new.numel() / total_s,
        "device": str(device),
        "host": socket.gethostname(),
    }


def run_worker(manifest_path: str, item: int) -> int:
    """One rank of the setting (the only one at TP 1): measures; rank 0 writes the result; a failure is recorded."""
    manifest = read_inference_manifest(manifest_path)
    setting = next(setting for setting in manifest.settings if setting.item == item)
    rank = rank_from_env()
    try:
        result = measure(manifest, setting)
    except BaseException as error:  # noqa: BLE001  (recorded for the analysis, then raised again)
        reason = failure_reason(error)
        write_status(
            setting.run_dir, {"rank": rank, "reason": reason, "ended": utc_now()}, f"{FAILURE_PREFIX}{rank}.json"
        )
        raise
    if rank == 0:
        write_status(setting.run_dir, result, RESULT_FILE)
        print(
            f"{setting.name}: {result['tokens_per_s']:.1f} tokens/s, {result['latency_s']:.3f} s per batch, "
            f"{result['first_token_latency_s']:.3f} s to the first token",
            flush=True,
        )
    return 0


def _ranks_command(manifest_path: str, setting: InferenceSetting) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={setting.tp * setting.pp}",
        "-m",
        PROGRAM,
        "--manifest",
        manifest_path,
        "--item",
        str(setting.item),
        "--worker",
    ]


def run_setting(manifest_path: str, item: int, keep_going: bool) -> int:
    manifest = read_inference_manifest(manifest_path)
    settings = {setting.item: setting for setting in manifest.settings}
    if item not in settings:
        print(f"Error: setting {item} is not in {manifest_path} (items {sorted(settings)})", file=sys.stderr)
        return 2
    setting = settings[item]
    write_status(setting.run_dir, {"state": "started", "host": socket.gethostname(), "started": utc_now()})
    print(f"setting {item}: {setting.name}", flush=True)
    reason = None
    try:
        if setting.tp * setting.pp == 1:
            report_absent_accelerators()
            code = run_worker(manifest_path, item)
        else:
            code = subprocess.run(_ranks_command(manifest_path, setting), env=dict(os.environ)).returncode
    except BaseException as error:  # noqa: BLE001  (the worker recorded it; the status says failed)
        code, reason = 1, failure_reason(error)
        traceback.print_exc()
        if not keep_going or isinstance(error, KeyboardInterrupt):
            write_status(setting.run_dir, {"state": "failed", "reason": reason, "ended": utc_now()})
            raise
    if code and reason is None:
        recorded = [record.get("reason") for record in failures_in(setting.run_dir)]
        reason = next((text for text in recorded if text), f"error: the ranks exited with status {code}")
    state = {"state": "failed" if reason else "finished", "exit_code": code, "ended": utc_now(), "reason": reason}
    write_status(setting.run_dir, {"host": socket.gethostname(), **state})
    return 0 if keep_going else code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"python3 -m {PROGRAM}")
    parser.add_argument("--manifest", required=True, help="the search's inference_manifest.json")
    parser.add_argument("--item", type=int, default=None, help="the setting (default: SLURM_ARRAY_TASK_ID)")
    parser.add_argument("--keep-going", action="store_true", help="exit 0 after a failure (sequential jobs)")
    parser.add_argument("--worker", action="store_true", help="run as one rank of the setting (set by this program)")
    arguments = parser.parse_args(argv)
    # The process that loads megatron-core names the absent accelerators: a rank, or the setting's task at TP 1.
    start_job(rank_from_env(), accelerators=arguments.worker)
    # Megatron's tensor-parallel layers ask for it (the training jobs with TP set it too); set before torch loads.
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    if arguments.worker:
        return run_worker(arguments.manifest, arguments.item)
    return run_setting(arguments.manifest, item_of(arguments), arguments.keep_going)


if __name__ == "__main__":
    sys.exit(main())
