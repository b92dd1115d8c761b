"""CLIP framework inference: `python3 -m nemo_launcher.jobs.clip.similarity --config <resolved fw_inference yaml>`.

One image (cropped as evaluation crops it) against each of the config's texts with the saved CLIP model. Writes
<run.results_dir>/similarity.json:

    {"model": ..., "image": ..., "logit_scale": 100.0, "best": "a red circle",
     "texts": [{"text": "a red circle", "similarity": 0.31, "logit": 31.0, "probability": 0.97}, ...]}

similarity is the cosine of the image's and the text's embeddings, logit the model's learned temperature times
it, probability the softmax of the logits over the texts (what the contrastive loss trained). The same numbers are
printed as a table. Schema: contract/schemas/vision_inference.py (ClipSimilarityConfig).
"""

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ...contract.schemas.vision_inference import SIMILARITY_FILE, STAGE, ClipSimilarityConfig
from ..common.config import JobConfigError
from ..vision.entry import saved_model_main

PROG = "python3 -m nemo_launcher.jobs.clip.similarity"


def scores(image_features, text_features, logit_scale: float, texts: Sequence[str]) -> list[dict]:
    """[1, d] and [n, d] unit vectors -> one entry per text (the serving side computes the same, clip/serving.py)."""
    import numpy as np

    similarity = np.asarray(text_features, dtype=np.float64) @ np.asarray(image_features, dtype=np.float64)[0]
    logits = logit_scale * similarity
    weights = np.exp(logits - logits.max())
    probabilities = weights / weights.sum()
    return [
        {"text": text, "similarity": float(s), "logit": float(g), "probability": float(p)}
        for text, s, g, p in zip(texts, similarity, logits, probabilities)
    ]


def table(rows: list[dict]) -> str:
    width = max(len("text"), *(len(row["text"]) for row in rows))
    best = max(range(len(rows)), key=lambda i: rows[i]["probability"])
    lines = [f"{'text'.ljust(width)}  similarity    logit  probability"]
    lines += [
        f"{row['text'].ljust(width)}  {row['similarity']:10.4f} {row['logit']:8.3f}  {row['probability']:11.4f}"
        + ("  <- best" if i == best else "")
        for i, row in enumerate(rows)
    ]
    return "\n".join(lines)


def work(cfg):
    import torch
    from PIL import UnidentifiedImageError

    from ..common.report import Summary
    from ..vision.saved_model_job import load_for

    if not Path(cfg.image_path).is_file():
        raise JobConfigError(f"{STAGE}.image_path={cfg.image_path!r}: no such file")
    saved = load_for(cfg, "clip", STAGE)
    try:
        pixels = saved.pixels(cfg.image_path)
    except (UnidentifiedImageError, OSError) as error:
        raise JobConfigError(
            f"{STAGE}.image_path={cfg.image_path!r}: not an image this job can read ({error})"
        ) from None
    image = saved.image_features(pixels.unsqueeze(0))
    batch = cfg.model.micro_batch_size
    text = torch.cat([saved.text_features(cfg.texts[i : i + batch]) for i in range(0, len(cfg.texts), batch)])
    rows = scores(image.cpu().numpy(), text.cpu().numpy(), saved.logit_scale(), cfg.texts)
    best = max(rows, key=lambda row: row["probability"])
    result = {
        "model": cfg.model.restore_from_path,
        "image": cfg.image_path,
        "precision": saved.precision,
        "logit_scale": saved.logit_scale(),
        "best": best["text"],
        "texts": rows,
    }
    output = Path(cfg.run.results_dir) / SIMILARITY_FILE
    output.write_text(json.dumps(result, indent=1))
    print(table(rows), flush=True)
    summary = Summary(f"similarity finished: 1 image against {len(rows)} texts")
    summary.add("best match", f"{best['text']!r} (probability {best['probability']:.4f})")
    return summary.add("results", output)


main = saved_model_main(PROG, ClipSimilarityConfig, STAGE, work)


if __name__ == "__main__":
    sys.exit(main())
