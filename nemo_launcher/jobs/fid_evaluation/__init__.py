"""FID and CLIP-score evaluation of text-to-image models, and the COCO-2014 data it reads.

Data preparation (`data_preparation=fid_evaluation/*`, schema contract/schemas/fid_evaluation_data.py):
`generate_shapes` (a COCO-format set of coloured shapes, for tiny configs) -> `standin_scorers` (random Inception
and CLIP files, for tiny configs) -> `preprocess` (centre-cropped 256-pixel images and one caption file per sampled
caption).

Evaluation (`evaluation=stable_diffusion/fid_clip`, schema contract/schemas/sd_evaluation.py): `generate` (an
array over guidance scales) -> `fid` -> `clip` -> `plot`, each `python3 -m nemo_launcher.jobs.fid_evaluation.<step>
--config <resolved yaml>`.
"""
