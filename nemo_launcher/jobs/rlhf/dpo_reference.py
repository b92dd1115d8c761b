"""The frozen reference of a DPO run, computed once: each pairs file copied with the reference's summed response
log-probs ("ref_chosen", "ref_rejected") on every line, so the trainer holds one model only.

    job = ReferenceFiles(output_dir, model_path, max_seq_length=512, micro_batch_size=8)
    job.write(split, source, model, tokenizer, placement)  # every rank; "computed" or "kept"
    job.check_current(split, source, key)                  # the trainer: refuses a missing or stale copy

Resumable: each copy is written to a temporary name and renamed when whole, and `reference.json` in the output
folder records what it was computed from (the data file's and the model's path, size and modification time, and
the length samples were cut to). A rerun keeps a copy whose record matches and computes the others; the trainer
refuses a copy made from other data or another model. The pairs are shared out over data-parallel ranks and
gathered on rank 0, which writes.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..common.config import JobConfigError
from .dpo import as_pairs, response_log_probs
from .pairs import collate_pairs, read_pairs

MANIFEST = "reference.json"
LENGTH_KEY = "rlhf_dpo.model.data.max_seq_length"


def fingerprint(path: str) -> dict:
    stat = os.stat(path)
    return {"path": str(Path(path).resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


@dataclass(frozen=True)
class ReferenceFiles:
    output_dir: str
    model_path: str
    max_seq_length: int
    micro_batch_size: int

    def output(self, split: str) -> Path:
        from ...contract.preference_data import pairs_file

        return Path(pairs_file(self.output_dir, split))

    def record(self, source: str) -> dict:
        """What a copy made now from `source` would be made from (the manifest's entry for its split)."""
        return {
            "source": fingerprint(source),
            "model": fingerprint(self.model_path),
            "max_seq_length": self.max_seq_length,
        }

    def _manifest(self) -> dict:
        path = Path(self.output_dir) / MANIFEST
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            return {}  # a torn manifest is no record: every split is computed again

    def is_current(self, split: str, source: str) -> bool:
        entry = self._manifest().get(split)
        return self.output(split).is_file() and entry is not None and entry.get("made_from") == self.record(source)

    def check_current(self, split: str, source: str, key: str) -> str:
        """The copy of `split` the trainer reads; refused when missing or made from other data or another model."""
        path = self.output(split)
        if not path.is_file():
            raise JobConfigError(
                f"{key}: no {path}; run the reference job first "
                "(python3 -m nemo_launcher.jobs.gpt.rlhf_dpo_reference --config <the same config>)"
            )
        if not self.is_current(split, source):
            raise JobConfigError(
                f"{key}: {path} was not computed from {source} and {self.model_path} as they are now "
                f"({Path(self.output_dir) / MANIFEST}); run the reference job again"
            )
        return str(path)

    def write(self, split: str, source: str, model, tokenizer, placement, say=print) -> str:
        """Every rank: computes the copy of `split` unless a current one exists; rank 0 writes it. The pairs are read
        as the trainer reads them (pairs.read_pairs: ids in the vocabulary, within max_seq_length)."""
        from megatron.core import parallel_state

        if self.is_current(split, source):
            say(f"reference {split}: kept {self.output(split)} (computed before from the same data and model)")
            return "kept"
        started = time.monotonic()
        records = read_pairs(source, tokenizer.vocab_size, self.max_seq_length, LENGTH_KEY)
        dp_rank, dp_size = parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
        mine = list(range(dp_rank, len(records), dp_size))
        device = next(model.parameters()).device
        found: dict[int, tuple[float, float]] = {}
        for first in range(0, len(mine), self.micro_batch_size):
            indices = mine[first : first + self.micro_batch_size]
            batch = collate_pairs([records[i] for i in indices], tokenizer.eod)
            sums = as_pairs(response_log_probs(model, {k: v.to(device) for k, v in batch.items()})).cpu().tolist()
            found.update(zip(indices, (tuple(row) for row in sums)))
        if placement.world_size > 1:
            shares = [None] * placement.world_size
            torch.distributed.all_gather_object(shares, found)
            for share in shares:  # TP ranks of one data-parallel rank hold the same values
                found.update(share)
        if placement.rank == 0:
            assert len(found) == len(records), (len(found), len(records))
            self._write_copy(split, source, found)
        if placement.world_size > 1:
            torch.distributed.barrier()
        say(f"reference {split}: {len(records)} pairs -> {self.output(split)} ({time.monotonic() - started:.1f} s)")
        return "computed"

    def _write_copy(self, split: str, source: str, found: dict[int, tuple[float, float]]) -> None:
        made_from = self.record(source)  # before reading: a source replaced meanwhile leaves a stale record
        out = self.output(split)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f"{out.name}.partial")
        with open(source) as lines, open(partial, "w") as copy:
            index = 0
            for line in lines:
                if not line.strip():
                    continue
                row = json.loads(line)
                row["ref_chosen"], row["ref_rejected"] = found[index]
                copy.write(json.dumps(row) + "\n")
                index += 1
            copy.flush()
            os.fsync(copy.fileno())
        os.replace(partial, out)
        manifest = self._manifest()
        manifest[split] = {"made_from": made_from, "pairs": len(found)}
        staged = Path(self.output_dir) / f"{MANIFEST}.partial"
        staged.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(staged, Path(self.output_dir) / MANIFEST)
