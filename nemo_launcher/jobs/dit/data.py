"""What a DiT trains on: seed 002's mock data, or an Megatron-Energon dataset whose loader state travels with the
checkpoints.

    train, valid, test = dit_datasets(cfg, sizes, dp_rank, dp_size, step_samples)

- mock: map-style datasets of random latents [C, T, H, W] and text embeddings [text_length, text_embedding_dim],
  each sample drawn from its own seed (so any rank recomputes any sample); the core's step samplers read them, and
  a resumed run reads what an uninterrupted one would.
- energon: `EnergonStream`, one endless stream of step batches (this rank's share of a global batch) through
  energon's savable loader; its state is saved in every checkpoint (recipe.DitModule), so a resumed run continues
  with the next unseen sample. Samples are `.pth` latents, `.pickle` text embeddings (a [tokens, width] array) and
  `.json` metadata, read as energon's CrudeWebdataset and cooked here.
"""

import contextlib
import dataclasses
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..common.config import JobConfigError

_VALIDATION_OFFSET = 1 << 40  # mock sample ids of the validation split start here, the test split's twice as far
_KEPT_STATES = 4  # loader states remembered behind the newest batch drawn (Lightning fetches one batch ahead)


class MockLatents(torch.utils.data.Dataset):
    """Random latents and text embeddings, sample i drawn from seed (seed, first_id + i)."""

    def __init__(self, count: int, latent_shape, text_length: int, text_dim: int, seed: int, first_id: int = 0):
        self.count, self.latent_shape = count, tuple(latent_shape)
        self.text_shape = (text_length, text_dim)
        self.seed, self.first_id = seed, first_id

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        sample_id = self.first_id + index
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + sample_id)
        return {
            "latents": torch.randn(self.latent_shape, generator=generator),
            "text": torch.randn(self.text_shape, generator=generator),
            "sample_id": torch.tensor(sample_id),
        }


def dit_datasets(cfg, sizes, dp_rank: int, dp_size: int, step_samples: int):
    """(train, validation, test) for the run; `sizes` are the samples each split is read for, `step_samples` the
    samples this rank takes per optimizer step."""
    m = cfg.model
    data = m.data
    if data.data_type == "mock":

        def mock(count, first_id):
            return (
                MockLatents(count, data.latent_shape, data.text_length, m.text_embedding_dim, m.seed, first_id)
                if count
                else None
            )

        return mock(data.mock_samples, 0), mock(sizes[1], _VALIDATION_OFFSET), mock(sizes[2], 2 * _VALIDATION_OFFSET)
    return EnergonStream(cfg, dp_rank, dp_size, step_samples), None, None


def describe(cfg) -> str:
    data, m = cfg.model.data, cfg.model
    shapes = f"latents {data.latent_shape} ({data.seq_length} tokens), text {data.text_length} x {m.text_embedding_dim}"
    if data.data_type == "mock":
        return f"mock: random {shapes}"
    return f"energon {data.path}: {shapes}"


def _cooker():
    """energon's Cooker turning a crude sample (decoded .pth, .pickle, .json) into a DitSample."""
    from megatron.energon import Cooker, Sample, basic_sample_keys, stateless

    @dataclasses.dataclass
    class DitSample(Sample):
        latents: torch.Tensor
        text: torch.Tensor

    @stateless
    def cook(crude: dict) -> DitSample:
        return DitSample(
            **basic_sample_keys(crude),
            latents=torch.as_tensor(crude["pth"]).float(),
            text=torch.as_tensor(crude["pickle"]).float(),
        )

    return Cooker(cook)


def _task_encoder(text_length: int):
    from megatron.energon import DefaultTaskEncoder

    class DitTaskEncoder(DefaultTaskEncoder):
        cookers = [_cooker()]

        def encode_sample(self, sample):
            # Text embeddings of different lengths are cut or zero-padded to one length so that they stack.
            text = sample.text[:text_length]
            if text.shape[0] < text_length:
                text = torch.cat([text, text.new_zeros(text_length - text.shape[0], text.shape[1])])
            return dataclasses.replace(sample, text=text)

    return DitTaskEncoder()


@contextlib.contextmanager
def _global_random_states_kept():
    """Starting the loader's iterator draws seeds from the global generators (torch, random, numpy). The training
    noise comes from those generators, whose states checkpoints save; a resumed run starts a new iterator after
    restoring them, so without this its noise would be shifted against an uninterrupted run's."""
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


class EnergonStream:
    """This rank's training stream of step batches from an Energon dataset, resumable from a saved loader state.

    `len()` is the number of samples in the dataset's training split (for the `data:` line)."""

    def __init__(self, cfg, dp_rank: int, dp_size: int, step_samples: int):
        from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

        data, m = cfg.model.data, cfg.model
        self.expected = (tuple(data.latent_shape), m.text_embedding_dim)
        worker_config = WorkerConfig(rank=dp_rank, world_size=dp_size, num_workers=data.num_workers, seed_offset=m.seed)
        try:
            dataset = get_train_dataset(
                data.path,
                worker_config=worker_config,
                batch_size=step_samples,
                shuffle_buffer_size=data.shuffle_buffer_size,
                max_samples_per_sequence=None,
                task_encoder=_task_encoder(data.text_length),
            )
        except (FileNotFoundError, ValueError) as error:
            raise JobConfigError(
                f"model.data.path: {data.path} is no Energon dataset ({error}); run `energon prepare` "
                "on its shards (data_preparation=dit/tiny_energon writes a generated one)"
            ) from None
        self.samples = len(dataset) * step_samples
        self.loader = get_savable_loader(dataset)
        self._states: dict[int, Any] = {}  # batches drawn -> the loader's state before the next one
        self._drawn = 0

    def __len__(self) -> int:
        return self.samples

    def restore(self, state) -> None:
        self.loader.restore_state_rank(state)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        batches = iter(self.loader)
        while True:
            self._states[self._drawn] = self.loader.save_state_rank()
            self._states.pop(self._drawn - _KEPT_STATES, None)
            with _global_random_states_kept(), warnings.catch_warnings():
                # energon's loader always pins host memory for the copy to a GPU (its torch iterator starts with the
                # first batch); on a CPU there is nothing to pin.
                warnings.filterwarnings("ignore", "'pin_memory' argument is set as true", UserWarning)
                batch = next(batches)
            self._drawn += 1
            self._check(batch)
            yield {"latents": batch.latents, "text": batch.text}

    def state_after(self, batches: int) -> Any | None:
        """The loader's state once `batches` step batches of this stream have been trained on: what a resumed run
        restores to read the next one. Lightning may have drawn one batch more already."""
        if batches in self._states:
            return self._states[batches]
        if batches != self._drawn:
            raise RuntimeError(f"loader state after {batches} batches asked, {self._drawn} drawn")
        return self.loader.save_state_rank()

    def _check(self, batch) -> None:
        latents, text = tuple(batch.latents.shape[1:]), batch.text.shape[-1]
        if (latents, text) != self.expected:
            raise JobConfigError(
                f"model.data.latent_shape: the Energon samples hold latents {list(latents)} and text "
                f"{text} wide; the config says {list(self.expected[0])} and text_embedding_dim "
                f"{self.expected[1]}: make them agree"
            )
