"""The automatic data blend used when `model.data.data_prefix` is null.

    auto_blend("/data/the_pile/preprocessed", alpha=0.7)
    -> [0.31, "/data/the_pile/preprocessed/pile_00_text_document", 0.69, ".../pile_01_text_document"]

Every `<prefix>.bin` with its `<prefix>.idx` in the folder (not below it) takes part, weighted by
size(.bin) ** alpha and normalised to sum 1: alpha 1.0 samples files in proportion to their tokens,
alpha 0.0 samples them equally, values between favour small files (as for multilingual data).
Prefixes are sorted, so every rank and every rerun builds the same blend. Standard library only:
the data preparation stage calls this too.
"""
import os
from pathlib import Path
from typing import List, Union


def auto_blend(preprocessed_dir: Union[str, Path], alpha: float) -> list:
    """[weight, prefix, weight, prefix, ...] over the indexed datasets in `preprocessed_dir`."""
    folder = Path(preprocessed_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such directory, so no data blend can be built from it")
    if alpha < 0:
        raise ValueError(f"blending alpha must be >= 0, got {alpha}")
    prefixes = _indexed_prefixes(folder)
    if not prefixes:
        raise FileNotFoundError(f"{folder}: holds no .bin/.idx pair; run data preparation first or set model.data.data_prefix")
    weights = [os.path.getsize(f"{prefix}.bin") ** alpha for prefix in prefixes]
    total = sum(weights)
    if total == 0:  # every .bin is empty and alpha > 0: nothing to weigh by, so weigh equally
        weights, total = [1.0] * len(prefixes), float(len(prefixes))
    blend: list = []
    for weight, prefix in zip(weights, prefixes):
        blend += [weight / total, prefix]
    return blend


def _indexed_prefixes(folder: Path) -> List[str]:
    prefixes = []
    for entry in sorted(folder.iterdir()):
        if entry.suffix == ".bin" and entry.is_file() and entry.with_suffix(".idx").is_file():
            prefixes.append(str(entry.with_suffix("")))
    return prefixes
