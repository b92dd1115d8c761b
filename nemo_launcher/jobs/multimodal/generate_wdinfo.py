"""generate_wdinfo: write wdinfo.pkl, the shard list a WebDataset training loader reads.

    python3 -u -m nemo_launcher.jobs.multimodal.generate_wdinfo --config <job dir>/<run.name>_hydra.yaml

wdinfo.pkl is a pickled dict: `tar_files` (paths relative to the folder of wdinfo.pkl, each holding exactly
`chunk_size` examples), `total_key_count` (= len(tar_files) x chunk_size) and `chunk_size`, as NeMo's loaders expect;
tars holding fewer examples (the last of each writer) are listed apart in `partial_tar_files` {path: examples}, so a
sampler that assumes equal tars never meets them. An example counts when it has every member of file_ext_in_tar.
"""

import os
import pickle

from ..common.errors import DataPrepError
from ..steps.config import run_step
from ..steps.step_report import StepReport
from .config import load_config
from .tars import count_examples, tar_files


def wdinfo(input_dir: str, relative_to: str, chunk: int, extensions) -> dict:
    full, partial = [], {}
    for name in tar_files(input_dir):
        path = os.path.join(input_dir, name)
        examples = count_examples(path, extensions)
        if examples > chunk:
            raise DataPrepError(
                f"data_preparation.generate_wdinfo.tar_chunk_size={chunk}: {path} holds {examples} "
                f"examples; set it to the chunk size the tars were written with"
            )
        shown = os.path.relpath(path, relative_to)
        if examples == chunk:
            full.append(shown)
        elif examples:
            partial[shown] = examples
    return {"tar_files": full, "total_key_count": len(full) * chunk, "chunk_size": chunk, "partial_tar_files": partial}


def main(argv=None) -> StepReport:
    cfg = load_config("generate_wdinfo", argv)
    step = cfg.generate_wdinfo
    report = StepReport("generate_wdinfo", unit="file")
    if not tar_files(step.input_dir):
        raise DataPrepError(f"data_preparation.generate_wdinfo.input_dir={step.input_dir!r}: no .tar files")
    target = step.output_wdinfo_path
    info = wdinfo(step.input_dir, os.path.dirname(os.path.abspath(target)), step.tar_chunk_size, step.file_ext_in_tar)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    temporary = f"{target}.tmp-{os.getpid()}"
    with open(temporary, "wb") as handle:
        pickle.dump(info, handle)
    os.replace(temporary, target)
    report.done(os.path.basename(target), output=target)
    report.note(
        "shards", f"{len(info['tar_files'])} of {step.tar_chunk_size} examples ({info['total_key_count']} in all)"
    )
    if info["partial_tar_files"]:
        report.note(
            "partial",
            f"{len(info['partial_tar_files'])} shorter tars with {sum(info['partial_tar_files'].values())} "
            f"examples, listed under partial_tar_files",
        )
    return report


if __name__ == "__main__":
    run_step(main)
