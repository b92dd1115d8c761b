"""GPT jobs on megatron-core. Pre-training uses PyTorch Lightning as the loop:

    python3 -u -m nemo_launcher.jobs.gpt.train --config <job dir>/<run.name>_hydra.yaml

The pre-training modules:
| module        | holds                                                                       |
|---------------|-----------------------------------------------------------------------------|
| config        | the schema of the resolved `training` section and its cross-key checks      |
| schedule      | pure step arithmetic: learning rate, batch-size ramp-up, consumed samples   |
| model         | TransformerConfig and GPTModel chunks from `model.*`                        |
| data          | megatron-core GPT datasets over the blend, the resumable samplers           |
| optim         | megatron-core DDP and optimizer from `model.optim`                          |
| parts         | builds all of the above for one process, without Lightning                  |
| module        | the LightningModule: one optimizer step per training batch                  |
| strategy      | the Lightning strategy: process placement, dist-checkpoint save and load    |
| checkpoints   | step-N folders, the completion marker, pruning, finding the newest          |
| callbacks     | saving on schedule / max_time / signals, metrics and the progress line      |
| flops         | model FLOPs per token and the GPU's peak, for MFU                           |
| train         | the program: wires the above together                                       |
The other modules here (conversion, fine-tuning, PEFT, export, serving) reuse these parts.
"""
