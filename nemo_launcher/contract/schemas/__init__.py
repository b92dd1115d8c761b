"""One schema per job program, bound by the launcher before submitting and by the job when it starts.

| module | stage section | job program |
|---|---|---|
| `run` | the `run:` keys every stage shares | (the launcher) |
| `common_training`, `common_tuning`, `common_conversion` | the sections and rules every family shares | |
| `gpt_training` | `training` (gpt3) | `nemo_launcher.jobs.gpt.train` |
| `gpt_sft` | `fine_tuning`, `peft` (gpt3) | `nemo_launcher.jobs.gpt.finetune`, `.peft` |
| `gpt_conversion` | `conversion` (gpt3) | `nemo_launcher.jobs.gpt.convert` |
| `gpt_evaluation` | `evaluation` (gpt3) | `nemo_launcher.jobs.gpt.evaluate` |
| `gpt_export` | `export` (gpt3) | `nemo_launcher.jobs.gpt.export` |
| `t5_training` | `training` (t5, mt5) | `nemo_launcher.jobs.t5.train` |
| `t5_conversion` | `conversion` (t5, mt5) | `nemo_launcher.jobs.t5.convert` |
| `t5_finetuning` | `fine_tuning` (t5, mt5) | `nemo_launcher.jobs.t5.finetune` (after `.squad_data`) |
| `t5_evaluation` | `evaluation` (t5, mt5) | `nemo_launcher.jobs.t5.evaluate` (after `.squad_data`) |
| `t5_export` | `export` (t5, mt5) | `nemo_launcher.jobs.t5.export` |
| `bert_training` | `training` (bert) | `nemo_launcher.jobs.bert.train` |
| `bert_conversion` | `conversion` (bert) | `nemo_launcher.jobs.bert.convert` |
| `data_preparation` | `data_preparation` | `nemo_launcher.jobs.data.*` |
| `multimodal_data` | `data_preparation` (multimodal) and its precache spec | `nemo_launcher.jobs.multimodal.*` |

Which family uses which is data: `nemo_launcher/launch/families.py`.
"""
