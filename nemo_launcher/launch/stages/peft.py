"""Parameter-efficient tuning stages: the base `.nemo` stays frozen and a small set of new parameters trains, in
the fine-tuning job layout (one job of trainer.num_nodes x trainer.devices processes on the trainer core).

    python3 main.py stages=[peft] peft=gpt3/squad peft.run.model_train_name=gpt3_126m              # LoRA
    python3 main.py stages=[prompt_learning] prompt_learning=gpt3/squad                             # p-/prompt tuning
    python3 main.py stages=[adapter_learning] adapter_learning=gpt3/squad                           # Houlsby adapters
    python3 main.py stages=[ia3_learning] ia3_learning=gpt3/squad                                   # IA3 vectors

peft writes the LoRA adapter file and, with model.peft.merge: true, a `.nemo` with the adapters merged in; the
other three write model.nemo_path (megatron_gpt_prompt.nemo, megatron_gpt_adapter.nemo, megatron_gpt_ia3.nemo),
which their evaluation configs read beside the base model. Each schema refuses another method's section.
"""

from .fine_tuning import FineTuningStage


class PeftStage(FineTuningStage):
    """The LoRA stage: LoRA adapters on the frozen base `.nemo`; with model.peft.merge also a merged `.nemo`."""

    kind = "peft"


class PromptLearningStage(FineTuningStage):
    """The prompt-learning stage: p-tuning or prompt tuning, virtual tokens before the frozen base's input."""

    kind = "prompt_learning"
    predicted_on_its_model = False


class AdapterLearningStage(FineTuningStage):
    """The adapter stage: Houlsby adapters after each layer's attention and MLP of the frozen base."""

    kind = "adapter_learning"
    predicted_on_its_model = False


class Ia3LearningStage(FineTuningStage):
    """The IA3 stage: IA3 vectors scaling the frozen base's keys, values and FFN activations."""

    kind = "ia3_learning"
    predicted_on_its_model = False
