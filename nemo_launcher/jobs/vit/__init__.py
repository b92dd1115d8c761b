"""ViT classification jobs on megatron-core's vision tower; training runs on the trainer core with ViT's recipe:

    python3 -u -m nemo_launcher.jobs.vit.train --config <job dir>/<run.name>_hydra.yaml

| module | holds                                                                                          |
|--------|------------------------------------------------------------------------------------------------|
| train  | the program: the core's run_program with the ViT schema, recipe and parts                       |
| recipe | forward step and cross-entropy loss (and top-1 accuracy), the parts over ImageNet's class folders |
| model  | the classifier: CLIPViTModel, a final norm and a one-hidden-layer head on the first class token   |
"""
