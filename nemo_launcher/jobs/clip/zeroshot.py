"""CLIP zero-shot evaluation: each class of ImageNet's validation folders named in the config's prompts ("a photo
of a {}."), every image given the class whose mean prompt embedding is nearest its own; top-1 (and top-5) accuracy.

    python3 -u -m nemo_launcher.jobs.clip.zeroshot --config <job dir>/<run.name>_hydra.yaml

Class names are model.class_names, or the class folder names with _ read as spaces (red_circle -> "red circle").
A class's text embedding is the normalised mean of its prompts' unit embeddings (CLIP's prompt ensembling); the
logits are the model's temperature times the cosines. The seed's warning holds: score in the training precision.
Writes <results_dir>/results/<task_name>_results.json and prints the table. Exit codes: 0, 2, 74, 75.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.clip.zeroshot"


def class_texts(cfg, classes):
    """The readable names of the class folders, in their order."""
    import re

    from ..common.config import JobConfigError

    names = cfg.model.class_names
    if names is None:
        if all(re.fullmatch(r"n\d{8}", name) for name in classes):
            raise JobConfigError(
                f"model.class_names: null, but {cfg.model.data.imagenet_val} names its classes by "
                f"WordNet id ({classes[0]}, ...), which no prompt can describe; list the readable "
                "class names in sorted folder order"
            )
        return [name.replace("_", " ") for name in classes]
    if len(names) != len(classes):
        raise JobConfigError(
            f"model.class_names: {len(names)} names for {len(classes)} class folders in "
            f"{cfg.model.data.imagenet_val}; give one per folder, in sorted folder order, or null"
        )
    return list(names)


def zeroshot_logits(cfg, saved, classes):
    import torch
    import torch.nn.functional as F

    names = class_texts(cfg, classes)
    per_class = [
        saved.text_features([prompt.format(name) for prompt in cfg.model.prompts]).mean(dim=0) for name in names
    ]
    weights = F.normalize(torch.stack(per_class), dim=-1)
    scale = saved.logit_scale()
    return lambda images: scale * saved.image_features(images) @ weights.T


def _folder_classes(cfg, saved):
    return None  # the folder's own sorted classes: CLIP has no fixed label set


def main(argv=None) -> int:
    from ...contract.schemas.vision_evaluation import ClipZeroshotConfig
    from ..vision.evaluation import run_vision_evaluation

    return run_vision_evaluation(argv, PROG, ClipZeroshotConfig, zeroshot_logits, "clip", classes_of=_folder_classes)


if __name__ == "__main__":
    sys.exit(main())
