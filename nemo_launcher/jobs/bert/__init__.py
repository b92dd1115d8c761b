"""BERT jobs on megatron-core. Pre-training runs on the trainer core (nemo_launcher/jobs/core) with BERT's recipe,
conversion on the core's conversion flow with BERT's ConversionFamily:

    python3 -u -m nemo_launcher.jobs.bert.train --config <job dir>/<run.name>_hydra.yaml
    python3 -u -m nemo_launcher.jobs.bert.convert --config <job dir>/<run.name>_hydra.yaml

| module  | holds                                                                                    |
|---------|------------------------------------------------------------------------------------------|
| train   | the program: the core's run_program with the BERT schema and recipe                      |
| recipe  | the BERT recipe: forward step, masked-LM and sentence-order losses                       |
| model   | TransformerConfig and BertModel chunks from `model.*`                                    |
| data    | megatron-core's BERT dataset (masked word pieces, segment pairs) over the blend          |
| flops   | model FLOPs per token, for MFU                                                           |
| convert | the conversion program: the core's run_conversion with the BERT schema                   |
| converter | BERT's ConversionFamily: schemas, inference model, shard layout, Hugging Face export   |
| standalone | the model outside training: parallel state, inference build, .nemo read back          |
| shards  | how megatron-core splits a BERT over TP x PP (rules for core/shards.py)                  |
| hf_export | MegatronBertForPreTraining / ForMaskedLM files, and why geglu or rope have none        |
"""
