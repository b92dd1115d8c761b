"""Config names a seed prints that live here under another name: `conversion=convert_t5` is t5/convert_t5.

An alias is a YAML file that holds nothing but a defaults list pulling in its target:

    defaults:
      - /conversion/t5/convert_t5@_here_
      - _self_

Hydra composes it as the target; the launcher then treats the choice as the target's name, so everything keyed by
`<family>/<name>` (the family table, same-family checks) sees the family the alias stands for.
"""

import os
from collections.abc import Mapping

import yaml

from .cli import CONF_DIR

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def alias_target(group: str, choice: str, conf_dir: str = CONF_DIR) -> str | None:
    """`family/name` that conf/<group>/<choice>.yaml stands for, or None when that file is a config of its own."""
    path = os.path.join(conf_dir, group, f"{choice}.yaml")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    if "@_here_" not in text:
        return None  # the usual case, decided without parsing
    document = yaml.load(text, Loader=_LOADER)
    if not isinstance(document, dict) or set(document) != {"defaults"}:
        return None
    entries = document["defaults"]
    prefix = f"/{group}/"
    if not (isinstance(entries, list) and len(entries) == 2 and entries[1] == "_self_"):
        return None
    first = entries[0]
    if not (isinstance(first, str) and first.startswith(prefix) and first.endswith("@_here_")):
        return None
    return first[len(prefix) : -len("@_here_")]


def canonical_choices(choices: Mapping[str, str | None], groups, conf_dir: str = CONF_DIR) -> dict[str, str | None]:
    """`choices` with every alias among the given groups' choices replaced by the config it stands for."""
    canonical = dict(choices)
    for group in groups:
        choice = canonical.get(group)
        if choice:
            canonical[group] = alias_target(group, choice, conf_dir) or choice
    return canonical
