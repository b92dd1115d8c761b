"""One schema per job program, bound by the launcher before submitting and by the job when it starts.

| module | stage section | job program |
|---|---|---|
| `run` | the `run:` keys every stage shares | (the launcher) |
| `gpt_training` | `training` (gpt3) | `nemo_launcher.jobs.gpt.train` |
| `gpt_sft` | `fine_tuning`, `peft` (gpt3) | `nemo_launcher.jobs.gpt.finetune`, `.peft` |
| `gpt_conversion` | `conversion` (gpt3) | `nemo_launcher.jobs.gpt.convert` |
| `gpt_evaluation` | `evaluation` (gpt3) | `nemo_launcher.jobs.gpt.evaluate` |
| `gpt_export` | `export` (gpt3) | `nemo_launcher.jobs.gpt.export` |
| `data_preparation` | `data_preparation` | `nemo_launcher.jobs.data.*` |
"""
