"""The trainer core: pre-training of any megatron-core model family under PyTorch Lightning, and the conversion of
its checkpoints.

A family (jobs/gpt, jobs/t5, jobs/bert) gives a `Recipe` (recipe.py: its model chunks, TransformerConfig,
datasets, microbatch forward step and loss) and a three-line train.py around `program.run_program`; everything
else lives here, the same for every family; for conversion a family gives a `ConversionFamily` (conversion.py)
and its `ShardRules` (shards.py). Dependencies run one way: family -> core -> common.

| module           | holds                                                                                  |
|------------------|----------------------------------------------------------------------------------------|
| recipe           | what a family provides: Recipe, ChunkStage (pre/post process, virtual stage), Sequences |
| program          | the program: config, lock, logging, parts, the Lightning trainer, summary, exit codes  |
| summary          | the closing summary of an attempt                                                      |
| parts            | processes, parallel groups, seeds, and the run's parts built from a recipe (no Lightning) |
| transformer      | layer-spec choice, vocabulary padding, shared TransformerConfig settings, chunk stages |
| schedule         | pure step arithmetic: learning rate, batch-size ramp-up, consumed samples              |
| datasets         | the data blend, split checks and split sizes every family's datasets share             |
| samplers         | the resumable step sampler, the evaluation sampler, the DataLoader                     |
| steps            | a step's microbatches through megatron-core's forward/backward; the masked token loss  |
| optim            | megatron-core DDP and optimizer from `model.optim`                                     |
| module           | the LightningModule: one optimizer step per training batch                             |
| strategy         | the Lightning strategy: process placement, dist-checkpoint save and load               |
| checkpoints      | step-N folders, the completion marker, pruning, finding the newest                     |
| checkpoint_space | free space checked before each save; a failed save explained (exit 74)                 |
| callbacks        | saving on schedule / max_time / signals, metrics and the progress line                 |
| flops            | GPUs' peak FLOP/s, for MFU                                                             |
| conversion       | checkpoint -> .nemo (any TP x PP) and Hugging Face, from a family's ConversionFamily    |
| shards           | merging and splitting TP x PP state dicts by a family's ShardRules                     |

Why here and not under jobs/common: common holds the small pieces every job program shares (configs,
placement, locks, reports), most of them standard library only, used by data steps and conversion too; the
core is one engine with torch, megatron-core and Lightning, sitting beside the family packages that use it.
"""
