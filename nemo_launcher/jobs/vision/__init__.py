"""What the vision families (jobs/vit, jobs/clip) share: megatron-core's vision tower, image preprocessing, and the
two image sources, ImageNet's class folders and WebDataset shards.

| module        | holds                                                                                       |
|---------------|---------------------------------------------------------------------------------------------|
| tower         | the TransformerConfig of a tower's keys, megatron-core's CLIPViTModel with a bidirectional spec |
| images        | decoding, training crops and flips, evaluation resize and centre crop, normalisation          |
| class_folders | ImageNet's layout (<folder>/<class>/<image>) as a map-style dataset sized for the run         |
| shards        | WebDataset tars of image-caption examples as a map-style dataset sized for the run            |
| shape_folders | the ViT family's data step: generated coloured shapes written as class folders (tiny configs) |
| entry         | the `main` of the image families' train.py and export.py and of the saved-model inference jobs |

Both datasets are indexed by the run's sample number, which is what the trainer core's step sampler hands out:
the position in the data, the pass over it and every random crop follow from that number alone, so a resumed
run reads exactly what an uninterrupted one would, with no loader state to save.
"""
