"""PEFT stage: LoRA adapters trained on a frozen `.nemo`, same data and job layout as fine-tuning.

    python3 main.py stages=[peft] peft=gpt3/squad peft.run.model_train_name=gpt3_126m

The job writes the adapter file and, with model.peft.merge: true, a `.nemo` with the adapters merged in. The
schema requires the model.peft section here (and refuses it under fine_tuning).
"""
from .fine_tuning import FineTuningStage


class PeftStage(FineTuningStage):
    kind = "peft"
