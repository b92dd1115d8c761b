"""CLIP on megatron-core: the vision tower (CLIPViTModel) and a causal text transformer (megatron-core's embedding
and GPT layers), each normalised and projected to output_dim, and a learned temperature.

    chunk = clip_chunk(cfg.model, vision_cfg, padded_vocab, use_te, stage, text_cfg, eos)   # recipe's build_chunk
    image_features, text_features, scale = chunk(images, tokens)     # [b, d] unit vectors; scale = exp(logit_scale)
    chunk.encode_image(images), chunk.encode_text(tokens)             # one side (evaluation, inference)

The image's features come from its first class token, the caption's from the position of its first end token
(tokens after it are padding the causal mask keeps out). Tensor parallelism splits both towers' heads and MLPs
and the text embedding's vocabulary; projections and the temperature are replicated.
"""

import torch
import torch.nn.functional as F

from ..core.recipe import ChunkStage
from ..vision.tower import build_tower, norm_class, tower_config, tower_keys


def vision_config(model, precision: str, on_gpu: bool, use_te: bool):
    return tower_config(tower_keys(model, model.vision), precision, on_gpu, use_te)


def text_config(model, precision: str, on_gpu: bool, use_te: bool):
    return tower_config(tower_keys(model, model.text), precision, on_gpu, use_te)


def text_layer_spec(use_te: bool):
    from megatron.core.models.gpt import gpt_layer_specs

    if use_te:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    return gpt_layer_specs.get_gpt_layer_local_spec()


def _megatron_module():
    from megatron.core.transformer.module import MegatronModule

    return MegatronModule


def _projection(width: int, output_dim: int) -> torch.nn.Linear:
    layer = torch.nn.Linear(width, output_dim, bias=False)
    torch.nn.init.normal_(layer.weight, std=width**-0.5)
    return layer


class ClipModel(_megatron_module()):
    def __init__(self, model, config, text_cfg, vocab_size: int, eos: int, use_te: bool):
        from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding
        from megatron.core.transformer.enums import ModelType
        from megatron.core.transformer.transformer_block import TransformerBlock

        super().__init__(config=config)
        self.model_type = ModelType.encoder_or_decoder
        self.eos = eos
        self.logit_scale_max = model.logit_scale_max
        vision, text = model.vision, model.text
        self.vision = build_tower(vision, config, use_te)
        self.vision_norm = norm_class(use_te)(
            config=config, hidden_size=vision.hidden_size, eps=vision.layernorm_epsilon
        )
        self.vision_projection = _projection(vision.hidden_size, model.output_dim)
        self.embedding = LanguageModelEmbedding(
            text_cfg,
            vocab_size=vocab_size,
            max_sequence_length=text.max_position_embeddings,
            position_embedding_type="learned_absolute",
        )
        # post_process: the block ends with its own LayerNorm.
        self.text = TransformerBlock(text_cfg, spec=text_layer_spec(use_te), pre_process=True, post_process=True)
        self.text_projection = _projection(text.hidden_size, model.output_dim)
        self.logit_scale = torch.nn.Parameter(torch.tensor(float(model.logit_scale_init)))

    def set_input_tensor(self, input_tensor) -> None:
        assert input_tensor is None or input_tensor == [None], "CLIP runs without pipeline stages"

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        summary = self.vision_norm(self.vision(images)[:, 0])
        return F.normalize(self.vision_projection(summary).float(), dim=-1)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)
        hidden = self.text(self.embedding(tokens, positions), None)  # [s, b, h]
        ends = (tokens == self.eos).int().argmax(dim=1)
        summary = hidden[ends, torch.arange(tokens.shape[0], device=tokens.device)]
        return F.normalize(self.text_projection(summary).float(), dim=-1)

    def scale(self) -> torch.Tensor:
        return self.logit_scale.float().clamp(max=self.logit_scale_max).exp()

    def forward(self, images: torch.Tensor, tokens: torch.Tensor):
        return self.encode_image(images), self.encode_text(tokens), self.scale()


def clip_chunk(model, config, vocab_size: int, use_te: bool, stage: ChunkStage, text_cfg, eos: int) -> ClipModel:
    """The recipe's build_chunk once the text tower's config and end token are bound (functools.partial)."""
    return ClipModel(model, config, text_cfg, vocab_size, eos, use_te)
