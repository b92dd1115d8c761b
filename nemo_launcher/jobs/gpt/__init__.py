"""GPT jobs on megatron-core. Pre-training runs on the trainer core (nemo_launcher/jobs/core) with GPT's recipe:

    python3 -u -m nemo_launcher.jobs.gpt.train --config <job dir>/<run.name>_hydra.yaml

The pre-training modules:
| module        | holds                                                                       |
|---------------|-----------------------------------------------------------------------------|
| train         | the program: the core's run_program with the GPT schema and recipe          |
| recipe        | the GPT recipe: forward step and loss, and what the core builds from below  |
| model         | TransformerConfig and GPTModel chunks from `model.*`                        |
| data          | megatron-core GPT datasets over the blend                                   |
| flops         | model FLOPs per token, for MFU                                              |
The other modules here (conversion, fine-tuning, PEFT, export, serving) reuse these and the core's parts.
"""
