"""CLIP jobs on megatron-core towers; training runs on the trainer core with CLIP's recipe:

    python3 -u -m nemo_launcher.jobs.clip.train --config <job dir>/<run.name>_hydra.yaml

| module    | holds                                                                                       |
|-----------|---------------------------------------------------------------------------------------------|
| train     | the program: the core's run_program with the CLIP schema, recipe, parts and module           |
| recipe    | forward step, the parts over WebDataset shards, the module keeping the EMA weights            |
| model     | vision tower (CLIPViTModel) and causal text transformer, each projected to output_dim          |
| loss      | the symmetric contrastive loss over features gathered from every data-parallel rank            |
| ema       | the exponential moving average of the weights, in checkpoints and at validation               |
| tokenizer | caption -> token ids: UTF-8 bytes, or CLIP's BPE from its vocab.json and merges.txt            |
"""
