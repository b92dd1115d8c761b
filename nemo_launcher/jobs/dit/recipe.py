"""DiT on the trainer core: the diffusion loss over latent tokens, mock or Energon data, the Energon loader's state
in every checkpoint.

    run_program(argv, prog, DitTrainingConfig, dit_recipe, build=build_dit_parts, module_class=DitModule)

Training noise and timesteps come from the default random generators, whose states every checkpoint saves, so a
resumed run draws what an uninterrupted one would; validation and test draw theirs from the samples' ids, so every
evaluation scores the same noised samples. The core (nemo_launcher/jobs/core) does everything else.
"""

import dataclasses
from functools import partial

import torch

from ..core.module import TrainingModule
from ..core.recipe import Recipe, Sequences
from .data import EnergonStream, describe, dit_datasets
from .diffusion import noise_schedule, noised
from .model import dit_chunk, flops_per_token, transformer_config

LOSS = "diffusion loss"


def diffusion_loss(per_token):
    """Mean squared error over this rank's latent tokens (context-parallel ranks average theirs in the gradients)."""
    loss = per_token.float().mean()
    # The schedule divides the returned loss by the number of microbatches in place; report a copy.
    return loss, {LOSS: loss.detach().clone()}


def dit_forward_step(data_iterator, model, schedule, model_cfg):
    batch = next(data_iterator)
    latents, text = batch["latents"], batch["text"]
    generator = None
    if not model.training and "sample_id" in batch:
        generator = torch.Generator(device=latents.device).manual_seed(int(batch["sample_id"][0]) + model_cfg.seed)
    noisy, timesteps, target = noised(schedule, latents, model_cfg.diffusion.prediction_type, generator)
    if model.training and model_cfg.caption_dropout_rate > 0:
        # Zeroed text is the "no caption" input classifier-free guidance contrasts with at sampling time.
        keep = torch.rand(text.shape[0], device=text.device) >= model_cfg.caption_dropout_rate
        text = text * keep[:, None, None].to(text.dtype)
    per_token = model(noisy, timesteps, text, target)
    return per_token, diffusion_loss


def _sequences(model) -> Sequences:
    return Sequences(model.data.seq_length)


def check_support(model, on_gpu: bool, use_te: bool) -> None:
    from ..common.config import JobConfigError

    if model.context_parallel_size > 1 and not use_te:
        raise JobConfigError(
            f"model.context_parallel_size: {model.context_parallel_size} needs Transformer Engine "
            "attention on GPUs (the local attention sees only its own tokens); use 1 here"
        )


def _summary_items(cfg, outcome):
    m = cfg.model
    variant = "adaLN-Zero with cross-attention" if m.cross_attention else "adaLN-Zero (pooled text in the conditioning)"
    return [
        ("model", f"DiT {variant}, {m.data.seq_length} latent tokens per sample"),
        (
            "objective",
            f"{m.diffusion.prediction_type} prediction, {m.diffusion.beta_schedule} schedule of "
            f"{m.diffusion.num_train_timesteps} steps",
        ),
    ]


def dit_recipe(cfg) -> Recipe:
    return Recipe(
        megatron_modules=(
            "megatron.core.transformer.transformer_block",
            "megatron.core.transformer.transformer_layer",
            "megatron.core.transformer.attention",
            "megatron.core.transformer.mlp",
        ),
        transformer_config=transformer_config,
        build_chunk=dit_chunk,
        build_datasets=None,
        forward_step=partial(dit_forward_step, schedule=noise_schedule(cfg.model.diffusion), model_cfg=cfg.model),
        loss_names=(LOSS,),
        sequences=_sequences,
        flops_per_token=flops_per_token,
        check_support=check_support,
        summary_items=_summary_items,
    )


def build_dit_parts(recipe: Recipe, cfg, placement, on_gpu: bool, resume=None):
    """The core's parts around freshly initialised DiT weights, over mock or Energon data (no tokenizer, no blend)."""
    from megatron.core import parallel_state

    from ..core.datasets import dataset_sizes
    from ..core.parts import assemble_parts, effective_model
    from ..core.transformer import build_chunks, transformer_engine_available

    use_te = cfg.model.transformer_engine and on_gpu and transformer_engine_available()
    model = effective_model(cfg.model, use_te)
    cfg = dataclasses.replace(cfg, model=model)
    recipe.check_support(model, on_gpu, use_te)
    config = recipe.transformer_config(model, cfg.trainer.precision_name(), on_gpu, use_te)
    chunks = build_chunks(recipe.build_chunk, model, config, 0, use_te)

    def datasets(batches):
        dp_rank, dp_size = parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
        return dit_datasets(cfg, dataset_sizes(cfg, batches), dp_rank, dp_size, model.global_batch_size // dp_size)

    return assemble_parts(
        recipe, cfg, placement, on_gpu, use_te, None, 0, config, chunks, datasets, data_description=describe(cfg)
    )


class DitModule(TrainingModule):
    """The core's module, reading an Energon stream when the data is one and keeping its loader state in checkpoints
    (per rank, like the random-number states: a resumed run must use the layout that saved it)."""

    def __init__(self, parts):
        super().__init__(parts)
        self._loader_state = None  # restored from the checkpoint, applied when the stream starts

    @property
    def _stream(self):
        train = self.parts.train_dataset
        return train if isinstance(train, EnergonStream) else None

    def train_dataloader(self):
        if self._stream is None:
            return super().train_dataloader()
        if self._loader_state is not None:
            self._stream.restore(self._loader_state)
        return self._stream

    def _loader_state_object(self, state):
        from megatron.core.dist_checkpointing.mapping import ShardedObject

        world, rank = self.parts.placement.world_size, self.parts.placement.rank
        return {"energon_loader_state": ShardedObject("energon_loader_state", state, (world,), (rank,), replica_id=0)}

    def sharded_extra_state(self):
        state = super().sharded_extra_state()
        if self._stream is not None:
            trained = self.trainer.global_step - self._first_step
            state.update(self._loader_state_object(self._stream.state_after(trained)))
        return state

    def on_train_start(self) -> None:
        super().on_train_start()
        self._first_step = self.trainer.global_step

    def sharded_extra_state_to_load(self, saved_layout):
        template = super().sharded_extra_state_to_load(saved_layout)
        if self._stream is not None and template:
            template.update(self._loader_state_object(None))
        return template

    def restore_extra_state(self, loaded) -> None:
        super().restore_extra_state(loaded)
        self._loader_state = loaded.get("energon_loader_state")
