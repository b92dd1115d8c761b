"""Tuning wing: the parameter-efficient methods and what every family's tuning job shares. The methods (LoRA in
lora.py, p-tuning and prompt tuning, Houlsby adapters and IA3 in peft_methods.py on layer_adapters.py and
virtual_prompts.py) on the trainer core's tuning module (base.py); the files they write (tuned_files.py,
lora_file.py); the supervised and prompt-learning data (sft_data.py, prompt_data.py); the evaluation of a tuned model
(tuned_evaluation.py). A family passes its model, forward step and base loader in (gpt/tuning.py, t5/prompt_tuning.py)."""
