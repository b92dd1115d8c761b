"""Conversion of the vision families: a ViT or CLIP training checkpoint (megatron-core distributed checkpoint) -> one
`.nemo` file at the TP asked for (saved_models.py describes the archive; load_vision_model reads it), and for CLIP
transformers' CLIPModel where it computes the same embeddings (clip/hf_export.py). A CLIP run trained with EMA
converts the average; a ViT archive records the class names of its training folder where that is readable.

    python3 -u -m nemo_launcher.jobs.vision.convert --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.vision.convert --config ...     (target TP = 2)

model.model_type picks the family (vit_classification: ViT, megatron_clip: CLIP) and so the schema the config
binds to. One process per rank of the target layout; each reads its slice of the checkpoint whatever TP it was
trained with (jobs/core/conversion.py). Exit codes: 0 done, 2 configuration error, 74 a write failed for lack of
space or permission, 75 run.results_dir is in use by another job.

Only the standard library is imported at module level: megatron's checkpoint code may spawn a helper process that
re-imports this module.
"""

import sys

PROGRAM = "nemo_launcher.jobs.vision.convert"


def _model_type(argv) -> str:
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config

    try:
        section = load_resolved_config(config_path_from_argv(argv, prog=f"python3 -m {PROGRAM}"))
    except JobConfigError:
        return ""  # run_conversion reports it
    return str((section.get("model") or {}).get("model_type", ""))


def main(argv=None) -> int:
    from ...contract.schemas import vision_conversion
    from ..core.conversion import run_conversion
    from .family import FAMILY_PACKAGES, family_for_model_type, family_record

    # A model_type of no family binds to the last family's schema (CLIP's), whose check names the key and its choices.
    record = family_for_model_type(_model_type(argv)) or family_record(FAMILY_PACKAGES[-1])

    def load_family():
        from .converter import vision_family

        return vision_family(record.name)

    return run_conversion(argv, PROGRAM, getattr(vision_conversion, record.conversion_schema), load_family)


if __name__ == "__main__":
    sys.exit(main())
