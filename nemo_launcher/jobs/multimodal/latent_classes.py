"""How well generated latents of the synthetic shapes (shapes.py) keep their class: each prompt's samples against
the mean latent of every class in the reference data. Used by DiT's and Stable Diffusion's sampling programs.

    # latents: per prompt [images, C, ...]; means: caption -> mean
    scores = nearest_class_scores(latents, prompts, means)
    scores["accuracy"], scores["chance"], scores["per_prompt"]["a red circle"]["nearest_is_own_class"]
"""


def nearest_class_scores(latents, prompts: list[str], means) -> dict:
    """Per prompt whose caption the reference holds: the share of its samples whose nearest class mean (mean
    squared difference) is its own class's, and the mean distance to its own mean against the other means."""
    import torch

    captions = sorted(means)
    table = torch.stack([means[c] for c in captions])  # [classes, C, T, H, W]
    scores, hits, total = {}, 0, 0
    for prompt, samples in zip(prompts, latents):
        if prompt not in means:
            continue
        distances = ((samples[:, None] - table[None]) ** 2).flatten(2).mean(-1)  # [images, classes]
        own = captions.index(prompt)
        nearest = distances.argmin(dim=1)
        others = torch.cat([distances[:, :own], distances[:, own + 1 :]], dim=1)
        scores[prompt] = {
            "nearest_is_own_class": float((nearest == own).float().mean()),
            "distance_to_own_class": float(distances[:, own].mean()),
            "distance_to_other_classes": float(others.mean()),
        }
        hits += int((nearest == own).sum())
        total += samples.shape[0]
    return {
        "per_prompt": scores,
        "accuracy": hits / total if total else None,
        "classes": len(captions),
        "chance": 1 / len(captions) if captions else None,
    }
