"""precache_encodings: encode every example once with frozen encoders and store the embeddings as WebDataset tars.

    python3 -u -m nemo_launcher.jobs.multimodal.precache_encodings --config <job dir>/<run.name>_hydra.yaml

The precache spec (precache_encodings.precache_config_path) lists the encodings; each example becomes <key>.pickle,
a dict {encoding key: numpy array in float16 or float32}, plus the original members of save_original_in_tar.
Text encodings with store_pad_tokens false keep only the positions the encoder's mask marks.

Task t of T takes its contiguous share of the input tars (reorganize_tar's plan order when there is one, so that
with the same partition task t reads exactly what reorganize task t wrote); its tasks_per_node processes take every
n-th of those. Process r of task t writes t<t>_r<r>_<n>.tar of tar_chunk_size examples each, and t<t>_r<r>.done when
it has finished. A rerun skips finished processes and continues an unfinished one after its last complete tar.
"""

import io
import json
import logging
import os
import pickle
from importlib import import_module

import yaml

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.multimodal_data import PrecacheSpec

from ..common.errors import DataPrepError
from ..steps.config import DataConfigError, run_step
from ..steps.step_report import StepReport
from .config import array_tasks, load_config, local_process, share
from .progress import Progress
from .reorganize_tar import PLAN
from .tars import AtomicTar, count_examples, examples, tar_files

log = logging.getLogger("multimodal.precache_encodings")


def load_spec(path: str) -> PrecacheSpec:
    if not os.path.isfile(path):
        raise DataConfigError(f"data_preparation.precache_encodings.precache_config_path={path!r}: no such file")
    with open(path) as handle:
        values = yaml.safe_load(handle) or {}
    try:
        return PrecacheSpec.from_dict(values, os.path.basename(path))
    except JobConfigError as error:
        raise DataConfigError(str(error)) from None


def build_encoders(spec: PrecacheSpec) -> list:
    built = []
    for number, encoding in enumerate(spec.encodings):
        options = dict(encoding.encoder_config)
        module, _, name = options.pop("cls").rpartition(".")
        try:
            cls = getattr(import_module(module), name)
        except (ImportError, AttributeError) as error:
            raise DataPrepError(
                f"precache spec: encodings[{number}].encoder_config.cls={module}.{name}: cannot be imported ({error})"
            ) from None
        encoder = cls(**options)
        built.append(getattr(encoder, "encode", encoder))
    return built


def input_tars(folder: str) -> list[str]:
    """reorganize_tar's output order when it planned this folder (the tars may not all exist yet), else the tars
    here."""
    plan = os.path.join(folder, PLAN)
    if os.path.isfile(plan):
        with open(plan) as handle:
            return json.load(handle)["outputs"]
    return tar_files(folder)


class Encoder:
    """The spec's encodings applied to batches of examples."""

    def __init__(self, spec: PrecacheSpec):
        self.spec = spec
        self.functions = build_encoders(spec)

    def encode(self, batch: list[dict[str, bytes]]) -> list[dict]:
        from PIL import Image

        results: list[dict] = [{} for _ in batch]
        for encoding, function in zip(self.spec.encodings, self.functions):
            member = "." + encoding.extension
            if encoding.modality == "image":
                inputs = [Image.open(io.BytesIO(members[member])) for members in batch]
            else:
                inputs = [members[member].decode("utf-8") for members in batch]
            output = function(inputs)
            values, mask = output if isinstance(output, tuple) else (output, None)
            if encoding.modality == "text" and not encoding.store_pad_tokens and mask is None:
                raise DataPrepError(
                    f"precache spec: {encoding.key}: store_pad_tokens is false but the encoder returns "
                    f"no mask; set store_pad_tokens true or use an encoder that returns (tensor, mask)"
                )
            dtype = "float16" if encoding.precision == 16 else "float32"
            array = values.detach().float().cpu().numpy().astype(dtype)
            for row, result in enumerate(results):
                if encoding.modality == "text" and not encoding.store_pad_tokens:
                    result[encoding.key] = array[row][mask[row].cpu().numpy().astype(bool)]
                else:
                    result[encoding.key] = array[row]
        return results


def _originals(spec: PrecacheSpec) -> list[str]:
    return sorted({"." + e.extension for e in spec.encodings if e.modality in spec.save_original_in_tar})


def precache_share(
    folder: str,
    names: list[str],
    out_dir: str,
    stem: str,
    chunk: int,
    spec: PrecacheSpec,
    encoder_of,
    progress: Progress,
    report: StepReport,
) -> None:
    """Encodes the examples of tars `names` into <out_dir>/<stem>_<n>.tar; `encoder_of()` builds the encoders."""
    done, plan_path = os.path.join(out_dir, f"{stem}.done"), os.path.join(out_dir, f"{stem}.plan.json")
    plan = {"inputs": names, "tar_chunk_size": chunk, "spec": [e.key for e in spec.encodings]}
    if os.path.isfile(plan_path):
        with open(plan_path) as handle:
            if json.load(handle) != plan:
                raise DataPrepError(
                    f"data_preparation.precache_encodings.output_dir={out_dir!r}: {stem} was written for "
                    f"other inputs or settings; empty the folder, or choose another output_dir"
                )
    else:
        _write_json(plan_path, plan)
    if os.path.isfile(done):
        report.kept(stem, output=done)
        return
    existing = []
    while os.path.isfile(os.path.join(out_dir, f"{stem}_{len(existing)}.tar")):
        existing.append(count_examples(os.path.join(out_dir, f"{stem}_{len(existing)}.tar"), [".pickle"]))
    skip, number = sum(existing), len(existing)
    required = sorted({"." + e.extension for e in spec.encodings})
    originals = _originals(spec)
    encoder = None
    pending: list = []
    written = 0

    def flush(final: bool) -> None:
        nonlocal pending, number, written, encoder
        while len(pending) >= chunk or (final and pending):
            part, pending = pending[:chunk], pending[chunk:]
            encoder = encoder or encoder_of()
            batches = [part[i : i + spec.batch_size_per_GPU] for i in range(0, len(part), spec.batch_size_per_GPU)]
            path = os.path.join(out_dir, f"{stem}_{number}.tar")
            with AtomicTar(path) as tar:
                for batch in batches:
                    for (key, members), encoded in zip(batch, encoder.encode([m for _, m in batch])):
                        sample = {"__key__": key, "pickle": pickle.dumps(encoded, protocol=4)}
                        sample.update({ext[1:]: members[ext] for ext in originals})
                        tar.write(sample)
                    progress.advance(len(batch))
            written += len(part)
            number += 1

    seen = 0
    for name in names:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise DataPrepError(
                f"data_preparation.precache_encodings.input_dir: {path} is missing; run reorganize_tar first"
            )
        for key, members in examples(path):
            if not all(ext in members for ext in required):
                report.note("left out", f"{key} in {name}: no {', '.join(e for e in required if e not in members)}")
                continue
            seen += 1
            if seen <= skip:
                continue
            pending.append((key, members))
            flush(final=False)
    flush(final=True)
    with open(done, "w") as handle:
        json.dump({"examples": seen, "tars": number}, handle)
    report.done(stem, output=done)
    report.note(f"{stem}", f"{seen} examples ({written} encoded now, {skip} before) in {number} tars")


def _write_json(path: str, values: dict) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as handle:
        json.dump(values, handle, indent=1)
    os.replace(temporary, path)


def main(argv=None) -> StepReport:
    cfg = load_config("precache_encodings", argv)
    step = cfg.precache_encodings
    spec = load_spec(step.precache_config_path)
    report = StepReport("precache_encodings", unit="process share")
    inputs = input_tars(step.input_dir)
    if not inputs:
        raise DataPrepError(
            f"data_preparation.precache_encodings.input_dir={step.input_dir!r}: no .tar files; "
            f"run reorganize_tar (or download_images) first"
        )
    tasks, count = array_tasks(cfg, "precache_encodings")
    rank, ranks = local_process()
    os.makedirs(step.output_dir, exist_ok=True)
    built: list[Encoder] = []

    def encoder_of() -> Encoder:
        if not built:
            built.append(Encoder(spec))
        return built[0]

    shares = {task: share(inputs, task, count)[rank::ranks] for task in tasks}
    progress = Progress("precache_encodings", None, "examples", cfg.progress)
    log.info(
        "tasks %s of %d, process %d of %d: %d input tars", tasks, count, rank, ranks, sum(map(len, shares.values()))
    )
    for task, names in shares.items():
        precache_share(
            step.input_dir,
            names,
            step.output_dir,
            f"t{task}_r{rank}",
            step.tar_chunk_size,
            spec,
            encoder_of,
            progress,
            report,
        )
    return report


if __name__ == "__main__":
    run_step(main)
