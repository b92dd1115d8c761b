"""The ViT classifier: megatron-core's vision tower, a LayerNorm on its first class token, and the seed's
pretraining head (an MLP with one hidden layer, tanh, as NeMo's ViT head) or its fine-tuning head (one linear layer).

    chunk = vit_chunk(cfg.model, config, 0, use_te, stage)   # what the recipe gives the trainer core
    logits = chunk(images)                                    # [b, num_classes]
    scores = chunk(images, labels)                            # [b, 2]: cross-entropy, 1.0 where top-1 is right
"""

import torch
import torch.nn.functional as F

from ..core.recipe import ChunkStage
from ..vision.tower import build_tower, norm_class, tower_config

SCORES = ("loss", "top1")  # columns of what the classifier returns with labels


def transformer_config(model, precision: str, on_gpu: bool, use_te: bool):
    return tower_config(model, precision, on_gpu, use_te)


def _megatron_module():
    from megatron.core.transformer.module import MegatronModule

    return MegatronModule


class VitClassifier(_megatron_module()):
    def __init__(self, model, config, use_te: bool):
        from megatron.core.transformer.enums import ModelType

        super().__init__(config=config)
        self.model_type = ModelType.encoder_or_decoder
        self.tower = build_tower(model, config, use_te)
        hidden = model.hidden_size
        self.final_norm = norm_class(use_te)(config=config, hidden_size=hidden, eps=model.layernorm_epsilon)
        # The fine-tuning head is one linear layer (head_type linear); pretraining's has a hidden layer before it.
        self.head_hidden = torch.nn.Linear(hidden, hidden) if model.head_type == "mlp" else None
        self.head_out = torch.nn.Linear(hidden, model.num_classes)

    def set_input_tensor(self, input_tensor) -> None:
        self.tower.set_input_tensor(input_tensor)

    def forward(self, images: torch.Tensor, labels: torch.Tensor = None) -> torch.Tensor:
        summary = self.final_norm(self.tower(images)[:, 0])
        if self.head_hidden is not None:
            summary = torch.tanh(self.head_hidden(summary))
        logits = self.head_out(summary)
        if labels is None:
            return logits
        logits = logits.float()
        loss = F.cross_entropy(logits, labels, reduction="none")
        return torch.stack([loss, (logits.argmax(dim=-1) == labels).float()], dim=1)


def vit_chunk(model, config, vocab_size: int, use_te: bool, stage: ChunkStage) -> VitClassifier:
    return VitClassifier(model, config, use_te)
