"""OmegaConf resolvers the configs use: ${multiply:a,b}, ${divide_ceil:a,b}, ${divide_floor:a,b},
${launcher_repo_root:}."""

import math
from pathlib import Path

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[2]


def _number(value):
    """Config values may arrive as strings (`${multiply:2,${x}}` passes text for literals in some positions)."""
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    return float(text) if any(c in text for c in ".eE") else int(text)


def _integral(value):
    return int(value) if float(value).is_integer() else value


RESOLVERS = {
    "multiply": lambda a, b: _integral(_number(a) * _number(b)),
    "divide_ceil": lambda a, b: math.ceil(_number(a) / _number(b)),
    "divide_floor": lambda a, b: math.floor(_number(a) / _number(b)),
    "launcher_repo_root": lambda: str(REPO_ROOT),
}


def register_resolvers() -> None:
    """Idempotent, so tests and sweeps can call it repeatedly."""
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
