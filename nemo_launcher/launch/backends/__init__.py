"""Backends by cluster_type. Adding one is a new module with a Backend subclass and a row here."""
from .base import Backend
from .bcp import BcpBackend
from .interactive import InteractiveBackend
from .slurm import SlurmBackend

BACKENDS = {backend.name: backend for backend in (SlurmBackend, BcpBackend, InteractiveBackend)}

__all__ = ["BACKENDS", "Backend"]
