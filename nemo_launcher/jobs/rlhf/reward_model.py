"""The scalar-head model of RLHF: a GPT (megatron-core GPTModel) whose output layer is replaced by one linear unit,
giving a float per position. The reward model reads it at a response's last token; PPO's critic at every position
(the value). `family` is the GPT family's record, `nemo_launcher.jobs.gpt.converter.GPT` (this wing imports no family).

    model, tokenizer, nemo_config = load_scalar_model(GPT, "rm.nemo", tp=1, precision="fp32", on_gpu=False)
    values = scores(model, tokens, lengths)              # [b, s] float32, 0 beyond each row's length
    rewards = last_token_scores(model, tokens, lengths)  # [b]: the scalar at position lengths-1
    save_scalar_model(model, nemo_config, "rm.nemo", "rlhf_rm", placement)   # collective, every rank calls it

    # inside a trainer, where the parallel state already exists (jobs/gpt/rlhf_rm.py):
    model, section = build_scalar_model(GPT, nemo_config, path, tp, precision, hidden_dropout=0.1)

load_scalar_model(family, path, tp, precision, on_gpu, hidden_dropout=0.0, attention_dropout=0.0):
    path: a reward-model `.nemo`, or a plain GPT `.nemo` (its output layer is dropped and a fresh head made, from a
    generator seeded with the config's `seed`, so every rank and every run gets the same head); written at any TP,
    loaded as this rank's shard of `tp` (PP 1). precision: fp32, bf16 or fp16. Starts the process group and
    megatron's parallel state when they are not running. Returns the model in eval mode, the tokenizer, and the
    config to save it with (carrying `reward_model: {head: scalar}`).
scores(model, tokens [b, s] long, lengths [b] long) -> [b, s]; last_token_scores(...) -> [b]. Both run the model as
    it is (train or eval mode, gradients when enabled); tokens are right-padded, with any id.
save_scalar_model(model, nemo_config, path, stage, placement): the model as a `.nemo` in the TP layout it runs in.

The archive is a GPT `.nemo` (core/nemo_archive.py) whose config carries `reward_model: {head: scalar}` and whose
weights hold `reward_head.weight` [1, hidden] and `reward_head.bias` [1] instead of `output_layer.weight`. The head is
the same on every tensor-parallel rank (replicated like the layer norms): the final hidden states it reads are whole
on each rank (no sequence parallelism here), so every rank computes the same scalar and the same head gradient.
It is not a language model: a GPT tool that binds its config to GPT's model section (conversion to Hugging Face,
generation) refuses the `reward_model` key rather than load a model without an output layer.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..common.config import JobConfigError, bind
from ..core.nemo_archive import layout_of, load_nemo, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
from ..core.shards import split_state_dict
from ..core.standalone import PRECISIONS
from ..tuning.tuned_files import save_model

CONFIG_KEY = "reward_model"  # the model config's mark of a scalar-head archive
HEAD = {"head": "scalar"}
HEAD_MODULE = "reward_head"
HEAD_KEYS = (f"{HEAD_MODULE}.weight", f"{HEAD_MODULE}.bias")
OUTPUT_LAYER_KEY = "output_layer.weight"


def is_scalar_model(nemo_config: Mapping[str, Any]) -> bool:
    """Whether an archive's config is a reward model's (else a plain GPT's); another head kind is refused."""
    mark = nemo_config.get(CONFIG_KEY)
    if mark is None:
        return False
    if not isinstance(mark, Mapping) or mark.get("head") != HEAD["head"]:
        raise JobConfigError(f"{CONFIG_KEY}={mark!r} in the .nemo config: only {HEAD} is known")
    return True


def scalar_config(nemo_config: Mapping[str, Any]) -> dict[str, Any]:
    """The config a reward-model archive is saved with: the base model's plus the mark."""
    return dict(nemo_config, **{CONFIG_KEY: dict(HEAD)})


def base_config(nemo_config: Mapping[str, Any]) -> dict[str, Any]:
    """The config without the mark: the family's model section, which binds it, has no such key."""
    return {key: value for key, value in nemo_config.items() if key != CONFIG_KEY}


def scalar_shard_layout(family) -> Callable[[Mapping[str, Any], int, int], Any]:
    """The family's shard layout with the head added: replicated over TP, on the last pipeline stage."""

    def layout(model_config: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int):
        base = family.shard_layout(model_config, tensor_parallel, pipeline_parallel)
        rules = dataclasses.replace(
            base.rules,
            replicated=(*base.rules.replicated, *HEAD_KEYS),
            last_stage=(*base.rules.last_stage, f"{HEAD_MODULE}."),
        )
        return dataclasses.replace(base, rules=rules)

    return layout


class _HeadAsOutputLayer:
    """Stands where GPTModel calls its output layer (`output_layer(hidden, weight=..., runtime_gather_output=...)`
    -> (logits, bias)): returns the head's [s, b, 1] instead of vocabulary logits. Not a module, so the head's
    parameters are registered once, as `reward_head.*`, and GPTModel's forward needs no change."""

    sequence_parallel = False  # GPTModel reads it in dynamic-batching inference

    def __init__(self, head: torch.nn.Linear):
        self.head = head

    def __call__(self, hidden_states, weight=None, runtime_gather_output=None):
        return self.head(hidden_states), None


def attach_scalar_head(model: torch.nn.Module, seed: int, init_std: float) -> torch.nn.Module:
    """Replaces a GPTModel's output layer by a fresh scalar head (weight ~ N(0, init_std) from a generator seeded
    with `seed`, bias 0, in the model's dtype and device), in place; returns the model."""
    if getattr(model, "pre_process", True) is False or not getattr(model, "post_process", True):
        raise JobConfigError("the reward model runs on one pipeline stage: set pipeline_model_parallel_size 1")
    reference = model.embedding.word_embeddings.weight
    hidden = model.config.hidden_size
    generator = torch.Generator().manual_seed(int(seed))
    head = torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        head.weight.copy_(torch.randn(1, hidden, generator=generator) * init_std)
        head.bias.zero_()
    head = head.to(dtype=reference.dtype, device=reference.device)
    if "output_layer" in model._modules:
        del model.output_layer  # its vocabulary weights (or the tied embedding's use) are not needed
    model.add_module(HEAD_MODULE, head)
    model.output_layer = _HeadAsOutputLayer(head)
    return model


def build_scalar_model(
    family,
    nemo_config: Mapping[str, Any],
    path: str,
    tensor_parallel: int,
    precision: str,
    hidden_dropout: float = 0.0,
    attention_dropout: float = 0.0,
) -> tuple[torch.nn.Module, Any]:
    """(this rank's scalar-head model with the archive's weights, in eval mode; the bound model section) for an
    archive whose config was read with read_nemo_config. The parallel state (TP, PP 1) must exist."""
    from megatron.core import parallel_state  # deferred: megatron-core loads with the model

    if precision not in PRECISIONS:
        raise JobConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    reward = is_scalar_model(nemo_config)
    section = bind(family.model_schema, base_config(nemo_config), "model")
    family.check_layout(section, tensor_parallel, 1)
    section = dataclasses.replace(
        family.inference_section(section, tensor_parallel, 1),
        hidden_dropout=hidden_dropout,
        attention_dropout=attention_dropout,
    )
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    layout = scalar_shard_layout(family) if reward else family.shard_layout
    if layout_of(nemo_config) == (tensor_parallel, 1):
        state_dict = load_nemo_shard(path, tp_rank, 0)
    else:  # written at another TP: merged and cut again for this one (each rank reads the archive whole once)
        _, full = load_nemo(path, shard_layout=layout)
        state_dict = split_state_dict(full, layout(nemo_config, tensor_parallel, 1), tp_rank, 0)
    vocab_rows = padded_vocab_of(state_dict, tensor_parallel, 0)
    model = family.build_inference_model(section, vocab_rows, precision)
    attach_scalar_head(model, int(nemo_config.get("seed", 1234)), float(nemo_config.get("init_method_std", 0.02)))
    if reward:
        load_weights(model, state_dict, path)
    else:  # a GPT: every weight but the output layer's; the fresh head stays
        weights = {key: value for key, value in state_dict.items() if key != OUTPUT_LAYER_KEY}
        weights.update({key: value for key, value in model.state_dict().items() if key in HEAD_KEYS})
        load_weights(model, weights, path)
    return model.eval(), section


def load_scalar_model(
    family,
    path: str,
    tp: int,
    precision: str,
    on_gpu: bool,
    hidden_dropout: float = 0.0,
    attention_dropout: float = 0.0,
) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """(model in eval mode, tokenizer, config to save it with): see the module docstring."""
    from ..common.tokenizer import load_tokenizer

    nemo_config = read_nemo_config(path)
    family.start_parallel(tp, 1, int(nemo_config.get("seed", 1234)))
    model, section = build_scalar_model(family, nemo_config, path, tp, precision, hidden_dropout, attention_dropout)
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    model = model.to(device)
    spec = section.tokenizer
    tokenizer = load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)
    return model, tokenizer, scalar_config(nemo_config)


def scores(model: torch.nn.Module, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[b, s] float32: the head's scalar at every position of right-padded rows, 0 at and beyond each row's length
    (causal attention: the padding changes no earlier position)."""
    width = tokens.shape[1]
    if lengths.min() < 1 or lengths.max() > width:
        raise ValueError(f"row lengths must be within 1..{width}, got {lengths.tolist()}")
    positions = torch.arange(width, device=tokens.device).expand_as(tokens)
    out = model(tokens, positions, None)  # [b, s, 1]: GPTModel's transposed "logits"
    real = positions < lengths.to(tokens.device).unsqueeze(1)
    return out.squeeze(-1).float() * real


def last_token_scores(model: torch.nn.Module, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[b] float32: the scalar at each row's last real token (position lengths-1): the reward of a response that
    ends there."""
    per_position = scores(model, tokens, lengths)
    last = (lengths.to(per_position.device) - 1).unsqueeze(1)
    return per_position.gather(1, last).squeeze(1)


def save_scalar_model(model: torch.nn.Module, nemo_config: Mapping[str, Any], path: str, stage: str, placement) -> None:
    """Writes the reward-model `.nemo` (collective: every rank calls it; the layout the model runs in)."""
    save_model(model, scalar_config(nemo_config), path, stage, placement)
