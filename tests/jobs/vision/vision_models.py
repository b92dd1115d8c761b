"""Saved vision models (`.nemo`) with random weights for the inference and export tests: the tiny ViT and CLIP
configs as shipped, built and written the way a finished training run writes them (vision/saved_models.py), without
training. What these tests check (the jobs compute what the model computes) does not need a trained model.

    path = random_vision_nemo(tmp / "vit.nemo", "vit/tiny", class_names=[...])
"""

from collections.abc import Sequence
from pathlib import Path

from tests.jobs.vision_support import write_config


def random_vision_nemo(path: Path, choice: str, class_names: Sequence[str] | None = None, overrides=()) -> Path:
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.core.transformer import padded_vocab_size
    from nemo_launcher.jobs.vision.saved_models import (
        build_vision_model,
        inference_section,
        model_section_dict,
        save_vision_model,
        start_vision_parallel,
    )

    family = choice.split("/")[0]
    work = path.parent / f"{path.stem}_config"
    work.mkdir(parents=True, exist_ok=True)
    if family == "vit":
        from nemo_launcher.contract.schemas.vit_training import VitTrainingConfig as schema
    else:
        from nemo_launcher.contract.schemas.clip_training import ClipTrainingConfig as schema
    cfg = schema.from_dict(load_resolved_config(write_config(work, work / "data", choice, overrides)))
    model = inference_section(cfg.model, family)
    start_vision_parallel(1, model.seed)
    tokenizer, vocab = None, 0
    if family == "clip":
        from nemo_launcher.jobs.multimodal.caption_tokenizer import load_clip_tokenizer

        tokenizer = load_clip_tokenizer(model.tokenizer)
        vocab = padded_vocab_size(tokenizer.vocab_size, model.make_vocab_size_divisible_by, 1)
    module = build_vision_model(family, model, "fp32", vocab, tokenizer, initialize=True)
    state = {key: value for key, value in module.state_dict().items() if not key.endswith("._extra_state")}
    save_vision_model(path, family, model_section_dict(cfg.model), state, "fp32", class_names)
    return path
