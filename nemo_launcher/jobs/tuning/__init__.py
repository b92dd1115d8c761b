"""Tuning wing: the parameter-efficient methods and what every family's tuning job shares. The methods (LoRA in
lora.py, p-tuning and prompt tuning, Houlsby adapters and IA3 in peft_methods.py on layer_adapters.py and
virtual_prompts.py) on the trainer core's tuning module (base.py); the tuning job and the fine-tuning programs'
runner (job.py: TuningJob, AllWeights, run_sft); the files they write (tuned_files.py, lora_file.py); the
supervised, prompt/answer and prompt-learning data (sft_data.py, answer_data.py, prompt_data.py); the evaluation of
a tuned model (tuned_evaluation.py). A family subclasses TuningJob with its recipe, base model loader and greedy
answers (gpt/tuning.py, t5/prompt_tuning.py)."""
