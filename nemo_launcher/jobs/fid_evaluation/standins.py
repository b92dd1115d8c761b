"""Stand-ins for the FID/CLIP scoring networks where the real weights cannot be fetched (tests, tiny configs):
randomly initialised, stored in the real ones' file formats so the evaluation reads them as it reads the real ones.

    write_random_inception("/data/fid_evaluation/inception_random.pth")   # torch-fidelity's state dict format
    write_tiny_clip("/data/fid_evaluation/clip_random")                    # a transformers CLIPModel folder

With random weights FID still measures how far apart two image sets' feature statistics are (0 for the same set,
growing as the sets differ), and the CLIP score is a cosine near 0 that carries no meaning about the caption.
"""

import json
import os

from .inception import write_random_inception

__all__ = ["write_random_inception", "write_tiny_clip"]


def write_tiny_clip(folder: str, seed: int = 0) -> str:
    """A 2-layer CLIP of width 32 over 32-pixel images, with a BPE tokenizer of single letters (no merges)."""
    import torch

    # The PIL image processor: the default one asks for torchvision (which does not import here) and says so.
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar for writing one small shard is noise in a job log

    os.makedirs(folder, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {
        token: index
        for index, token in enumerate([*letters, *(c + "</w>" for c in letters), "<|startoftext|>", "<|endoftext|>"])
    }
    with open(os.path.join(folder, "vocab.json"), "w") as handle:
        json.dump(vocab, handle)
    with open(os.path.join(folder, "merges.txt"), "w") as handle:
        handle.write("#version: 0.2\n")
    tokenizer = CLIPTokenizer(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"))
    end = vocab["<|endoftext|>"]
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=40,
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=end,
            pad_token_id=end,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CLIPModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder
