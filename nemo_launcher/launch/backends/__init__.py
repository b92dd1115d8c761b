"""Backends by cluster_type. Adding one is a new module with a Backend subclass and a row here."""

import importlib

# cluster_type -> (module, class); imported on use so a run pays only for the backend it needs.
BACKENDS = {
    "bcm": ("slurm", "SlurmBackend"),
    "bcp": ("bcp", "BcpBackend"),
    "interactive": ("interactive", "InteractiveBackend"),
}


def backend_class(cluster_type: str):
    module, name = BACKENDS[cluster_type]
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["BACKENDS", "backend_class"]
