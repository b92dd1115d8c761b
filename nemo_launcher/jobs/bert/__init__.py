"""BERT jobs on megatron-core. Pre-training runs on the trainer core (nemo_launcher/jobs/core) with BERT's recipe:

    python3 -u -m nemo_launcher.jobs.bert.train --config <job dir>/<run.name>_hydra.yaml

| module  | holds                                                                                    |
|---------|------------------------------------------------------------------------------------------|
| train   | the program: the core's run_program with the BERT schema and recipe                      |
| recipe  | the BERT recipe: forward step, masked-LM and sentence-order losses                       |
| model   | TransformerConfig and BertModel chunks from `model.*`                                    |
| data    | megatron-core's BERT dataset (masked word pieces, segment pairs) over the blend          |
| flops   | model FLOPs per token, for MFU                                                           |
"""
