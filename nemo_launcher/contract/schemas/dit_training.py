"""Schema of the resolved `training` section of the DiT family (conf/_family/dit_training.yaml): a diffusion
transformer (adaLN-Zero blocks, optionally with cross-attention to text embeddings) on megatron-core layers,
trained to predict the noise (or the velocity) added to image/video latents.

    cfg = DitTrainingConfig.from_dict(section)    # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)       # the trainer, once it knows how many processes started

Seed 002's NeMo 2.0 keys map here as: trainer.strategy.{tensor,context}_model_parallel_size and sequence_parallel
-> model.*; model.config.* -> model.*; data.{micro,global}_batch_size -> model.*; data.seq_length and
data.task_encoder.seq_length -> model.data.seq_length. The run, trainer, exp_manager and optimizer sections are
every family's (common_training).
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, no_pipeline_parallel, non_negative, positive, positive_fields
from .common_training import (
    LayerStack,
    OptimSection,
    TrainingSections,
    check_heads,
    check_recompute,
)
from .run import RunBase

STAGE = "training"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DitRun(RunBase):
    # Slurm: when the trainer stops before max_steps (time limit, max_time), it saves and the job requeues itself.
    auto_requeue: bool = True


@dataclasses.dataclass(frozen=True)
class DiffusionSection:
    """The forward (noising) process and what the network predicts; the schedule is diffusers' DDPMScheduler's."""

    prediction_type: Literal["epsilon", "v_prediction"] = "epsilon"  # the added noise, or the velocity
    num_train_timesteps: int = 1000
    beta_schedule: Literal["linear", "scaled_linear", "squaredcos_cap_v2"] = "linear"
    beta_start: float = 1.0e-4  # noise variance at the first step (linear and scaled_linear)
    beta_end: float = 0.02  # noise variance at the last step

    def check(self, key: str) -> None:
        positive(f"{key}.num_train_timesteps", self.num_train_timesteps)
        if not 0.0 < self.beta_start < self.beta_end < 1.0:
            raise field_fault(self, key, "beta_start", f"needs 0 < beta_start < beta_end ({self.beta_end}) < 1")


@dataclasses.dataclass(frozen=True)
class DitData:
    """mock: random latents and text embeddings of the configured shapes, seed 002's mock data mode. energon: a
    Megatron-Energon dataset of WebDataset shards whose samples are `<key>.pth` latents [C, T, H, W], `<key>.pickle`
    text embeddings [tokens, text_embedding_dim] and `<key>.json` metadata, indexed by `energon prepare`."""

    data_type: Literal["mock", "energon"]
    seq_length: int  # latent tokens per sample: (T / patch_temporal) x (H / patch_spatial) x (W / patch_spatial)
    latent_shape: list[int]  # [channels, frames, height, width] of one sample's latents
    text_length: int  # text-embedding tokens per sample (energon: longer ones are cut, shorter ones zero-padded)
    path: str | None = None  # energon: the dataset folder (holds .nv-meta/); mock: unused
    num_workers: int = 2  # loader worker processes per rank
    shuffle_buffer_size: int = 100  # energon: samples mixed in the shuffle buffer
    mock_samples: int = 1024  # mock: distinct training samples before they repeat
    dataloader_type: Literal["single", "cyclic"] = "single"  # mock: samples in order, or reshuffled on each pass

    def check(self, key: str) -> None:
        positive_fields(self, key, "seq_length", "text_length", "shuffle_buffer_size", "mock_samples")
        non_negative(f"{key}.num_workers", self.num_workers)
        if len(self.latent_shape) != 4 or not all(isinstance(n, int) and n > 0 for n in self.latent_shape):
            raise field_fault(self, key, "latent_shape", "expected [channels, frames, height, width], each > 0")
        if self.data_type == "energon" and not self.path:
            raise field_fault(self, key, "path", "data_type energon reads an Energon dataset folder: set its path")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DitModelSection(LayerStack):
    text_embedding_dim: int  # width of the text embeddings (T5-XXL: 4096)
    optim: OptimSection
    data: DitData
    diffusion: DiffusionSection = dataclasses.field(default_factory=DiffusionSection)
    pipeline_model_parallel_size: int = 1  # must be 1 (see check)
    context_parallel_size: int = 1  # splits each sample's tokens over ranks; needs Transformer Engine attention
    patch_spatial: int = 2  # latent pixels per token side
    patch_temporal: int = 1  # latent frames per token
    cross_attention: bool = True  # true: blocks attend to the text tokens; false: pooled text joins the timestep
    qk_layernorm: bool = True  # layer norm on queries and keys (stabilises video training)
    caption_dropout_rate: float = 0.0  # share of training samples whose text is zeroed (classifier-free guidance)
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    layernorm_epsilon: float = 1.0e-6

    def check(self, key: str) -> None:
        self.check_sizes(key, "text_embedding_dim", "context_parallel_size", "patch_spatial", "patch_temporal")
        if not 0.0 <= self.caption_dropout_rate < 1.0:
            raise field_fault(self, key, "caption_dropout_rate", "must be in [0, 1), e.g. 0.1")
        no_pipeline_parallel(
            self,
            key,
            "DiT runs without pipeline stages here (the per-stage copy of the conditioning is not "
            "built): set 1 and split the model with tensor_model_parallel_size instead",
        )
        _, frames, height, width = self.data.latent_shape
        for name, size, patch in (
            ("frames", frames, self.patch_temporal),
            ("height", height, self.patch_spatial),
            ("width", width, self.patch_spatial),
        ):
            if size % patch:
                raise config_fault(
                    f"{key}.data.latent_shape",
                    self.data.latent_shape,
                    f"latent {name} {size} is not divisible by its patch size {patch}",
                )
        tokens = self.tokens_per_sample()
        if self.data.seq_length != tokens:
            raise config_fault(
                f"{key}.data.seq_length",
                self.data.seq_length,
                f"latents {self.data.latent_shape} in patches of {self.patch_temporal}x{self.patch_spatial}x"
                f"{self.patch_spatial} make {tokens} tokens; set seq_length to {tokens} or change latent_shape",
            )
        cp, tp = self.context_parallel_size, self.tensor_model_parallel_size
        split = cp * (tp if self.sequence_parallel else 1)
        if tokens % split:
            raise config_fault(
                f"{key}.data.seq_length",
                tokens,
                f"must be divisible by context_parallel_size({cp})"
                + (f" x tensor_model_parallel_size({tp}) (sequence parallel)" if self.sequence_parallel else ""),
            )
        if cp > 1 and not self.transformer_engine:
            raise config_fault(
                f"{key}.context_parallel_size",
                cp,
                "context parallelism needs Transformer Engine attention: set transformer_engine: true",
            )
        check_heads(self, key)
        check_recompute(self, key)

    def tokens_per_sample(self) -> int:
        _, frames, height, width = self.data.latent_shape
        return (frames // self.patch_temporal) * (height // self.patch_spatial) * (width // self.patch_spatial)


@dataclasses.dataclass(frozen=True)
class DitTrainingConfig(TrainingSections):
    run: DitRun
    model: DitModelSection

    def check(self, key: str) -> None:
        if self.model.data.data_type == "energon":
            for name in ("limit_val_batches", "limit_test_batches"):
                if getattr(self.trainer, name):
                    raise config_fault(
                        f"{key}.trainer.{name}",
                        getattr(self.trainer, name),
                        "an Energon dataset is read as one endless training stream here: set 0 "
                        "(or use model.data.data_type: mock to validate on held-out mock samples)",
                    )
        self.check_layout_and_schedule(key)
        self._check_cpu_parallelism(key)

    def _check_cpu_parallelism(self, key: str) -> None:
        """What splits a sample's tokens needs Transformer Engine, which runs on GPUs only: on the CPU context
        parallelism would fail at the first step and sequence parallelism would be dropped (the local spec's torch
        LayerNorm refuses it), so both are refused before the queue wait."""
        if self.trainer.accelerator != "cpu":
            return
        m = self.model
        if m.context_parallel_size > 1:
            raise config_fault(
                f"{key}.model.context_parallel_size",
                m.context_parallel_size,
                "context parallelism needs Transformer Engine attention, on GPUs only: set 1 with "
                "trainer.accelerator cpu",
            )
        if m.sequence_parallel and m.tensor_model_parallel_size > 1:
            raise config_fault(
                f"{key}.model.sequence_parallel",
                True,
                "sequence parallelism needs Transformer Engine's norms, on GPUs only (the local spec's "
                "torch LayerNorm refuses it): set false with trainer.accelerator cpu",
            )

    def reads(self) -> list[tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: the Energon dataset's index."""
        data = self.model.data
        if data.data_type != "energon":
            return []
        return [(f"{STAGE}.model.data.path", f"{data.path}/.nv-meta/dataset.yaml")]
