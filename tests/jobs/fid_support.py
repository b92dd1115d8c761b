"""Stand-ins for the scoring models of the FID/CLIP evaluation, written as the real ones are stored: a randomly
initialised Inception state dict in torch-fidelity's format, and a tiny transformers CLIP folder (model, BPE
tokenizer over letters, image processor). Nothing is downloaded."""
import json
import os


def write_tiny_clip(folder: str, seed: int = 0) -> str:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    os.makedirs(folder, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {token: index for index, token in enumerate([*letters, *(c + "</w>" for c in letters),
                                                         "<|startoftext|>", "<|endoftext|>"])}
    with open(os.path.join(folder, "vocab.json"), "w") as handle:
        json.dump(vocab, handle)
    with open(os.path.join(folder, "merges.txt"), "w") as handle:
        handle.write("#version: 0.2\n")
    tokenizer = CLIPTokenizer(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"))
    end = vocab["<|endoftext|>"]
    config = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=40, bos_token_id=vocab["<|startoftext|>"],
                         eos_token_id=end, pad_token_id=end),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16)
    torch.manual_seed(seed)
    CLIPModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder
