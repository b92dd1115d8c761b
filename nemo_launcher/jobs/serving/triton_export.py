"""A text model's Triton model repository, for every text family's export program (gpt/export.py, t5/export.py),
and the config.pbtxt pieces the image exports share (vision/triton_entries.py, stable_diffusion/export.py).

    return run_export(argv, "python3 -m nemo_launcher.jobs.gpt.export", ExportConfig, load=load_gpt_nemo)

What it writes, under triton_deployment.triton_model_dir:

    <model_repo>/<model name>/config.pbtxt   backend python, max_batch_size, tensors, instances, parameters
    <model_repo>/<model name>/1/model.py     the backend (triton_text_model.py)
    <model_repo>/<model name>/1/model.nemo   the weights in model.weight_data_type, and the tokenizer files

The folder is built beside its final place and swapped in when complete, so a server never sees half an export.
Exit codes of run_export: 0 done, 2 configuration error, 74 a write failed for lack of space or permission, 75
run.results_dir is in use by another job (one `Error:` line on stderr for each), anything else a crash.
"""

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ...contract.schemas.gpt_export import ExportConfig, TritonDeployment
from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
from ..common.quiet import start_job
from ..common.report import JobFault, Summary, duration, print_error, size, size_of
from ..common.run_directory import claimed
from .text import GENERATOR_PARAMETER, INPUTS, MODEL_FILE, OUTPUTS

TEMPLATE = Path(__file__).with_name("triton_text_model.py")
VERSION = "1"


def config_pbtxt(name: str, deployment: TritonDeployment, launcher_path: str, generator: str | None = None) -> str:
    """Triton's model configuration, in its protobuf text format. generator: "module:Class" of a family's own
    generator (text.py's GENERATOR_PARAMETER); None serves text.py's DEFAULT_GENERATOR."""
    parameters = {
        "data_type": deployment.data_type,
        "tokens_to_generate": str(deployment.tokens_to_generate),
        "launcher_path": launcher_path,
    }
    if generator is not None:
        parameters[GENERATOR_PARAMETER] = generator
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        f"max_batch_size: {deployment.max_batch_size}",
        *tensors_pbtxt(INPUTS, OUTPUTS),
        f"instance_group [ {{ count: {deployment.instance_count} kind: {deployment.instance_kind} }} ]",
    ]
    for key, value in parameters.items():
        lines.append(parameter_pbtxt(key, value))
    return "\n".join(lines) + "\n"


def tensors_pbtxt(inputs, outputs) -> list:
    """config.pbtxt's input and output blocks for serving.TensorSpec entries (dims without the batch dimension)."""

    def tensor(spec) -> str:
        optional = " optional: true" if spec.optional else ""
        return (
            f'  {{ name: "{spec.name}" data_type: {spec.triton_type} '
            f"dims: [ {', '.join(map(str, spec.dims))} ]{optional} }}"
        )

    return [
        "input [",
        ",\n".join(tensor(s) for s in inputs),
        "]",
        "output [",
        ",\n".join(tensor(s) for s in outputs),
        "]",
    ]


def parameter_pbtxt(key: str, value: str) -> str:
    quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f'parameters: {{ key: "{key}" value: {{ string_value: {quoted} }} }}'


def export(cfg: ExportConfig, load: Callable, generator: str | None = None) -> Path:
    """load: path -> (model config, full state dict), the family's rule for merging a sharded archive;
    generator: see config_pbtxt."""
    # Deferred: torch loads after run_export's start_job has put the warning filters in place.
    import torch

    from ..core.nemo_archive import save_nemo

    target = Path(cfg.triton_deployment.triton_model_dir)  # the schema made sure it ends in the model's name
    config, state_dict = load(cfg.model.checkpoint_path)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[cfg.model.weight_data_type]
    state_dict = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / VERSION).mkdir(parents=True)
    save_nemo(staging / VERSION / MODEL_FILE, config, state_dict)
    shutil.copyfile(TEMPLATE, staging / VERSION / "model.py")
    launcher_path = str(Path(__file__).resolve().parents[3])  # the folder holding the nemo_launcher package
    (staging / "config.pbtxt").write_text(config_pbtxt(target.name, cfg.triton_deployment, launcher_path, generator))
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def run_export(argv, prog: str, schema, job: Callable | None = None, **export_options) -> int:
    """The export program of any text family: bind `schema`, hold the lock, export, summary, exit codes.
    job: the family's export(cfg, **export_options) when it checks more than the schema (GPT: the .nemo's layout);
    by default this module's. export_options: export()'s load and generator."""
    started = time.monotonic()
    start_job(accelerators=False)  # one process, plain torch: megatron-core is not imported
    try:
        cfg = schema.from_dict(load_resolved_config(config_path_from_argv(argv, prog=prog)))
        with claimed(cfg.writes()[0], rank=0):
            target = (job or export)(cfg, **export_options)
            export_summary(cfg, target, time.monotonic() - started).show()
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0


def export_summary(cfg: ExportConfig, target: Path, seconds: float):
    repository = target.parent
    summary = Summary(f"export finished: {cfg.model.checkpoint_path}")
    summary.add(
        "model repository",
        f"{repository} (model {target.name!r}, {size(size_of(target))}, {cfg.model.weight_data_type} weights)",
    )
    tensor_parallel, pipeline_parallel = (
        cfg.model.tensor_model_parallel_size,
        cfg.triton_deployment.pipeline_model_parallel_size,
    )
    if (tensor_parallel, pipeline_parallel) != (1, 1):
        summary.add("gathered", f"TP({tensor_parallel}) x PP({pipeline_parallel}) shards into one TP=1 PP=1 model")
    summary.add("serve it with", f"tritonserver --model-repository {repository}")
    summary.add("or", f"python3 deployment/serve_pytriton.py --model-repository {repository}")
    return summary.add("time", duration(seconds))
