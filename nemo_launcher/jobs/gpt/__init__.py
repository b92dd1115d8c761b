"""GPT pre-training on megatron-core with PyTorch Lightning as the loop.

    python3 -u -m nemo_launcher.jobs.gpt.train --config <job dir>/<run.name>_hydra.yaml

| module        | holds                                                                       |
|---------------|-----------------------------------------------------------------------------|
| config        | the schema of the resolved `training` section and its cross-key checks      |
| schedule      | pure step arithmetic: learning rate, batch-size ramp-up, consumed samples   |
| model         | TransformerConfig and GPTModel chunks from `model.*`                        |
| data          | tokenizer, megatron-core GPT datasets over the blend, the resumable sampler |
| optim         | megatron-core optimizer from `model.optim`                                  |
| module        | the LightningModule: one optimizer step per training batch                  |
| strategy      | the Lightning strategy: process placement, dist-checkpoint save and load     |
| checkpoints   | step-N folders, the completion marker, pruning, finding the newest          |
| callbacks     | saving on schedule / max_time / signals, metrics and the progress line      |
| flops         | model FLOPs per token and the GPU's peak, for MFU                           |
| train         | the program: wires the above together                                       |
"""
