"""T5 and mT5 jobs on megatron-core. Pre-training runs on the trainer core (nemo_launcher/jobs/core) with T5's
recipe; mT5 is the same model with a SentencePiece vocabulary:

    python3 -u -m nemo_launcher.jobs.t5.train --config <job dir>/<run.name>_hydra.yaml
    python3 -u -m nemo_launcher.jobs.t5.convert --config ...          (checkpoint -> .nemo, Hugging Face)

| module          | holds                                                                            |
|-----------------|----------------------------------------------------------------------------------|
| train           | the program: the core's run_program with the T5 schema and recipe                |
| recipe          | the T5 recipe: attention masks, forward step and loss, sequence lengths          |
| model           | TransformerConfig, layer specs and T5Model chunks from `model.*`; FLOPs per token |
| attention_bias  | the local core attention with relative-position bias (megatron-core's refuses it) |
| data            | megatron-core's T5 span-corruption datasets over the blend                       |
| convert         | the conversion program: core/conversion.py's flow with T5's part                 |
| converter       | T5's part of the conversion: schemas, model, TP rules, Hugging Face export        |
| standalone      | a T5 model for jobs that do not train (conversion, evaluation): build, save, load |
| shards          | how megatron-core splits a T5 over TP (rules for core/shards.py)                 |
| hf_export       | T5ForConditionalGeneration / MT5ForConditionalGeneration where one matches exactly |
"""
