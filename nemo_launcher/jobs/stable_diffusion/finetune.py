"""What InstructPix2Pix and DreamBooth training add to Stable Diffusion's: the networks start from the SD checkpoint
the config names, and the data is theirs. The loss, EMA, checkpoints and the .nemo are recipe.py's.

    # jobs/stable_diffusion/instruct_pix2pix_train.py
    run_finetune(argv, prog, InstructPix2PixTrainingConfig, edit_data)

Every network starts from cfg.starting_checkpoint() (a .nemo or a training checkpoint folder of ours), except a
DreamBooth UNet that unet_config.from_pretrained names. A UNet reading more input channels than the checkpoint's
(InstructPix2Pix: 8 from 4) gets the extra input weights of its first convolution at zero, so at step 0 it computes
what the SD model computes whatever the input image. A resumed run then loads its own checkpoint over these.
"""

import dataclasses

import torch

from ..common.config import JobConfigError
from .model import TEXT_ENCODER, UNET, VAE, _load_strict, _our_weights
from .recipe import build_sd_parts, sd_chunk, sd_recipe

FIRST_CONV = "conv_in.weight"  # the UNet's input convolution [out, in, k, k]


def widened(state: dict[str, torch.Tensor], unet, source: str, key: str) -> dict[str, torch.Tensor]:
    """`state` with its first-convolution weight padded with zero input channels up to the UNet's."""
    ours, theirs = unet.state_dict()[FIRST_CONV], state.get(FIRST_CONV)
    if theirs is None or theirs.shape == ours.shape:
        return state
    if theirs.shape[:1] + theirs.shape[2:] != ours.shape[:1] + ours.shape[2:] or theirs.shape[1] > ours.shape[1]:
        raise JobConfigError(
            f"{key}: the UNet in {source} reads {theirs.shape[1]} input channels with a first "
            f"convolution of {tuple(theirs.shape)}; this config's needs {tuple(ours.shape)}: check "
            "unet_config against the checkpoint's"
        )
    wide = torch.zeros(ours.shape, dtype=theirs.dtype)
    wide[:, : theirs.shape[1]] = theirs
    return {**state, FIRST_CONV: wide}


def load_starting_weights(chunk, model) -> None:
    """The networks of `chunk` (recipe.py's LatentDiffusion) from the SD checkpoint the model section names."""
    key = f"model.{model.starting_key}"
    source = getattr(model, model.starting_key)
    state = _our_weights(source, key)
    networks = [(VAE, chunk.vae), (TEXT_ENCODER, chunk.text_encoder)]
    if not model.unet_config.from_pretrained:
        networks.append((UNET, chunk.unet))
    for prefix, network in networks:
        own = {name[len(prefix) :]: value for name, value in state.items() if name.startswith(prefix)}
        if network is chunk.unet:
            own = widened(own, network, source, key)
        with torch.no_grad():
            _load_strict(network, own, source, key)


def finetune_chunk(model, config, vocab_size: int, use_te: bool, stage):
    chunk = sd_chunk(model, config, vocab_size, use_te, stage)
    load_starting_weights(chunk, model)
    return chunk


def finetune_recipe(cfg):
    # The fine-tunes read other data (instance images, edit triplets) and their schemas size runs in steps only.
    return dataclasses.replace(sd_recipe(cfg), build_chunk=finetune_chunk, epoch_samples=None)


def run_finetune(argv, prog: str, schema, data_module: str) -> int:
    """The training program of a fine-tune; `data_module` (imported once the config binds) gives
    datasets(cfg, tokenizer, sizes) and describe(cfg, train, valid)."""
    from ..core.program import run_program

    def build(*args, **kwargs):
        import importlib

        data = importlib.import_module(data_module)
        return build_sd_parts(*args, **kwargs, datasets_for=data.datasets, description=data.describe)

    def module(parts):
        from .recipe import SdModule

        return SdModule(parts)

    return run_program(argv, prog, schema, finetune_recipe, build=build, module_class=module)
