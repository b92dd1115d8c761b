"""Stage kinds by config group name. Adding one is a new module with a Stage subclass and a row here."""
from .base import Stage
from .training import TrainingStage

STAGES = {stage.kind: stage for stage in (TrainingStage,)}

__all__ = ["STAGES", "Stage"]
