"""The automatic data blend used when `model.data.data_prefix` is null.

    auto_blend("/data/the_pile/preprocessed", alpha=0.7)
    -> [0.31, "/data/the_pile/preprocessed/pile_00_text_document", 0.69, ".../pile_01_text_document"]

The components of the blend are every `<prefix>.bin` with its `<prefix>.idx` in the folder, and every subfolder
(not hidden) holding such pairs: a subfolder is one component, its datasets sharing its weight in proportion
to their sizes. A component's weight is size(.bin, summed over a subfolder) ** alpha, normalised to sum 1:
alpha 1.0 samples in proportion to tokens, alpha 0.0 samples components equally, values between favour small
components. mC4 data preparation writes one subfolder per language (`<dir>/de/de_000_text_sentence`, ...), so
languages are sampled by size ** alpha whatever number of splits each was cut into (mT5 used alpha 0.3).
Prefixes are sorted, so every rank and every rerun builds the same blend. Standard library only: the data
preparation stage calls this too.
"""

import os
from pathlib import Path


def auto_blend(preprocessed_dir: str | Path, alpha: float) -> list:
    """[weight, prefix, weight, prefix, ...] over the indexed datasets in `preprocessed_dir` and its subfolders."""
    folder = Path(preprocessed_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such directory, so no data blend can be built from it")
    if alpha < 0:
        raise ValueError(f"blending alpha must be >= 0, got {alpha}")
    components = [[prefix] for prefix in _indexed_prefixes(folder)]
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and not entry.name.startswith("."):
            grouped = _indexed_prefixes(entry)
            if grouped:
                components.append(grouped)
    if not components:
        raise FileNotFoundError(
            f"{folder}: holds no .bin/.idx pair; run data preparation first or set model.data.data_prefix"
        )
    sizes = [[os.path.getsize(f"{prefix}.bin") for prefix in component] for component in components]
    weights = [sum(parts) ** alpha for parts in sizes]
    total = sum(weights)
    if total == 0:  # every .bin is empty and alpha > 0: nothing to weigh by, so weigh equally
        weights, total = [1.0] * len(components), float(len(components))
    blend: list = []
    for weight, component, parts in sorted(zip(weights, components, sizes), key=lambda item: item[1][0]):
        share = weight / total
        whole = sum(parts)
        for prefix, size in zip(component, parts):
            blend += [share * (size / whole if whole else 1.0 / len(component)), prefix]
    return blend


def _indexed_prefixes(folder: Path) -> list[str]:
    prefixes = []
    for entry in sorted(folder.iterdir()):
        if entry.suffix == ".bin" and entry.is_file() and entry.with_suffix(".idx").is_file():
            prefixes.append(str(entry.with_suffix("")))
    return prefixes
