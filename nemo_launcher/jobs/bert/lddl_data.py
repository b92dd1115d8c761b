"""BERT training on LDDL's binned pairs (`model.data.dataloader_type: LDDL`): every micro-batch from one bin, its
sequence length that bin's upper edge.

    train, valid, test = build_lddl_datasets(cfg, tokenizer, sizes=[train, validation, test samples], blend=[])
    microbatches = lddl_microbatches(step_batch, micro_batch_size)     # the recipe's split_microbatches

model.data.data_prefix names the train, validation and test folders (contract/lddl.py). A split's samples are
numbered as the trainer core's samplers number them (core/samplers.py: a data-parallel rank takes runs of
micro_batch_size consecutive numbers), so the order is built from whole blocks of micro_batch_size pairs of one
bin: each pass (epoch) shuffles every bin's rows, cuts them into blocks (a bin's last rows short of a block wait
for a later pass) and shuffles the blocks, all seeded by (model.seed, pass). Within a pass no pair comes twice;
the ranks of a step read different blocks; and sample n is the same pair with the same masking in every run, so
a resumed run reads exactly what an uninterrupted one would (the core's sampler position comes from the step).

A sample is megatron-core's BERT sample of that pair: [CLS] A [SEP] B [SEP], token types 0 then 1, word pieces
masked by megatron-core's own masking code (drawn from RandomState(model.seed + n), as its BERT dataset does,
LDDL's dynamic masking), is_random from the pair's is_random_next. Samples leave the dataset padded to
encoder_seq_length so that the core's default collate can stack a step's micro-batches, with `bin_length`; the
split cuts each micro-batch down to its bin's length, so the model never sees the padding beyond it.
"""

import numpy as np
import torch

from ...contract.lddl import bins_on_disk, read_bins_record
from ..common.config import JobConfigError
from ..core.datasets import masked_word_piece_settings

KEY = "model.data.data_prefix"
ALIGNMENT = 8  # bins without lddl_bins.json end at their longest pair rounded up to this (LDDL's alignment)
COLUMNS = ["A", "B", "is_random_next", "num_tokens"]


def _read_bins(folder: str, seq_length: int) -> tuple[list, list[int]]:
    """(each bin's rows as a pyarrow table, memory-mapped; each bin's upper edge in tokens) of a split folder."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found = bins_on_disk(folder)
    if not found or sorted(found) != list(range(len(found))):
        raise JobConfigError(
            f"{KEY}: {folder} holds no complete set of binned LDDL shards (shard-<n>.parquet_<bin>, bins 0 up); "
            "run the BERT data preparation with lddl"
        )
    record = read_bins_record(folder)
    tables, edges = [], []
    for bin_id in range(len(found)):
        table = pq.read_table(found[bin_id], columns=COLUMNS, memory_map=True)
        longest = pc.max(table.column("num_tokens")).as_py() or 0
        edge = (bin_id + 1) * record["bin_size"] if record else -(-longest // ALIGNMENT) * ALIGNMENT
        if longest > edge or edge > seq_length:
            raise JobConfigError(
                f"{KEY}: bin {bin_id} of {folder} holds pairs of up to {longest} tokens (edge {edge}), above "
                f"model.encoder_seq_length ({seq_length}); prepare the data with lddl.target_seq_length <= {seq_length}"
            )
        tables.append(table)
        edges.append(edge)
    return tables, edges


def _masking(cfg, tokenizer):
    """megatron-core's masking, as its BERT dataset applies it: the dataset's own methods on our settings. Built
    inside a function so that importing this module does not import megatron-core."""
    from types import SimpleNamespace

    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset

    class Masking:
        _create_masked_lm_predictions = BERTMaskedWordPieceDataset._create_masked_lm_predictions
        _get_token_mask = BERTMaskedWordPieceDataset._get_token_mask

        def __init__(self):
            self.config = SimpleNamespace(**masked_word_piece_settings(cfg, tokenizer, []))
            self.token_lookup = list(tokenizer.inv_vocab.keys())

    return Masking()


class LddlPairs(torch.utils.data.Dataset):
    """`size` samples of one split folder, in passes of whole one-bin blocks (module docstring)."""

    def __init__(self, folder: str, size: int, cfg, tokenizer, masking):
        self.seq_length = cfg.model.encoder_seq_length
        self.micro = cfg.model.micro_batch_size
        self.seed = cfg.model.seed
        self.bins, self.edges = _read_bins(folder, self.seq_length)
        self.size = size
        self.tokenizer, self.masking = tokenizer, masking
        self.unknown = tokenizer.vocab["[UNK]"]
        counts = [table.num_rows for table in self.bins]
        self.pass_length = sum(count - count % self.micro for count in counts)
        if self.pass_length == 0:
            raise JobConfigError(
                f"{KEY}: no bin of {folder} holds micro_batch_size ({self.micro}) pairs ({counts} per bin); "
                "prepare more data or lower model.micro_batch_size"
            )
        self._pass, self._order = None, None

    def __len__(self) -> int:
        return self.size

    def pass_order(self, number: int) -> np.ndarray:
        """(bin, row) of every sample of pass `number`, in order: shuffled one-bin blocks of micro_batch_size."""
        if number != self._pass:
            rng = np.random.default_rng([self.seed, number])
            blocks = []
            for bin_id, table in enumerate(self.bins):
                order = rng.permutation(table.num_rows)
                usable = len(order) - len(order) % self.micro
                blocks += [
                    np.stack([np.full(self.micro, bin_id), order[k : k + self.micro]], axis=1)
                    for k in range(0, usable, self.micro)
                ]
            self._order = np.concatenate([blocks[i] for i in rng.permutation(len(blocks))])
            self._pass = number
        return self._order

    def locate(self, index: int) -> tuple[int, int]:
        """(bin, row) of sample `index`."""
        number, offset = divmod(index, self.pass_length)
        bin_id, row = self.pass_order(number)[offset]
        return int(bin_id), int(row)

    def _ids(self, text: str) -> list[int]:
        return [self.tokenizer.vocab.get(piece, self.unknown) for piece in text.split()]

    def __getitem__(self, index: int) -> dict:
        bin_id, row = self.locate(index)
        table, t = self.bins[bin_id], self.tokenizer
        a, b = self._ids(table.column("A")[row].as_py()), self._ids(table.column("B")[row].as_py())
        tokens = [t.cls, *a, t.sep, *b, t.sep]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        rng = np.random.RandomState(seed=(self.seed + index) % 2**32)
        tokens, positions, labels, _, _ = self.masking._create_masked_lm_predictions(tokens, self.seq_length, rng)
        pad = self.seq_length - len(tokens)
        # -1 where nothing is masked, as megatron-core's BERT sample has it (the loss mask leaves those out).
        sample_labels = np.full(self.seq_length, -1, dtype=np.int64)
        sample_labels[positions] = labels
        loss_mask = np.zeros(self.seq_length, dtype=np.int64)
        loss_mask[positions] = 1
        return {
            # Padding is id 0 ([PAD] in BERT's vocabularies), as in megatron-core's sample; the padding mask hides it.
            "text": np.pad(np.asarray(tokens, np.int64), (0, pad)),
            "types": np.pad(np.asarray(types, np.int64), (0, pad)),
            "labels": sample_labels,
            "is_random": int(table.column("is_random_next")[row].as_py()),
            "padding_mask": np.pad(np.ones(len(tokens), np.int64), (0, pad)),
            "loss_mask": loss_mask,
            "truncated": 0,
            "bin_length": self.edges[bin_id],
        }


def build_lddl_datasets(cfg, tokenizer, sizes: list[int], blend: list):
    """(train, validation, test) over the three LDDL folders; `blend` is unused (LDDL data is no blend)."""
    folders = cfg.model.data.lddl_folders("model.data")
    masking = _masking(cfg, tokenizer)
    return tuple(
        LddlPairs(folder, size, cfg, tokenizer, masking) if size else None for folder, size in zip(folders, sizes)
    )


def lddl_microbatches(batch: dict, micro_batch_size: int) -> list[dict]:
    """A step's samples as micro-batches, each cut to its bin's length (its samples share one bin)."""
    microbatches = []
    for first in range(0, len(batch["bin_length"]), micro_batch_size):
        rows = slice(first, first + micro_batch_size)
        lengths = batch["bin_length"][rows]
        length = int(lengths[0])
        assert bool((lengths == length).all()), "an LDDL micro-batch mixes bins"
        microbatches.append(
            {
                name: value[rows, :length] if value.dim() == 2 else value[rows]
                for name, value in batch.items()
                if name != "bin_length"
            }
        )
    return microbatches


def lddl_description(cfg) -> str:
    """What the run reads, for its summary."""
    return "LDDL bins: " + ", ".join(cfg.model.data.lddl_folders("model.data"))
