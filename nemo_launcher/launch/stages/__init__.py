"""Stage kinds by config group name. Adding one is a new module with a Stage subclass and a row here."""
from .base import Stage
from .conversion import ConversionStage
from .data_preparation import DataPreparationStage
from .evaluation import EvaluationStage
from .export import ExportStage
from .fine_tuning import FineTuningStage
from .peft import PeftStage
from .training import TrainingStage

STAGES = {stage.kind: stage for stage in (DataPreparationStage, TrainingStage, ConversionStage, FineTuningStage, PeftStage, EvaluationStage, ExportStage)}

__all__ = ["STAGES", "Stage"]
