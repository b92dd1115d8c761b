"""The `main` of the image families' entry modules, built from names, as core/entry.py builds the text families':

    main = image_training_main(__package__, ClipTrainingConfig, "clip_recipe", "build_clip_parts", "ClipModule")
    main = vision_export_main(__package__, ClipExportConfig, "clip")
    main = saved_model_main(PROG, ClipSimilarityConfig, STAGE, work)

Each program is `python3 -m <the family's package>.<module>`. Nothing but the standard library is imported here:
torch, megatron-core and the family's modules load only once the program runs (core/entry.py says why).
"""

from collections.abc import Callable

from ..core.entry import Main, training_main


def image_training_main(package: str, schema, recipe: str, build: str, module: str) -> Main:
    """The train.py of a family that trains its own kind of model (ViT, CLIP, Stable Diffusion, DiT): `recipe`,
    the parts builder `build` and the TrainingModule class `module` are names in <package>.recipe."""
    return training_main(
        f"python3 -m {package}.train", schema, f"{package}.recipe", recipe=recipe, build=build, module=module
    )


def vision_export_main(package: str, schema, family: str) -> Main:
    """The export.py of a vision family: vision/export.py's job for the saved models of `family`."""

    def main(argv=None) -> int:
        from .export import run_vision_export

        return run_vision_export(argv, f"python3 -m {package}.export", schema, family)

    return main


def saved_model_main(prog: str, schema, stage: str, work: Callable) -> Main:
    """A one-process job over a saved vision model (saved_model_job.py): work(cfg) -> Summary."""

    def main(argv=None) -> int:
        from .saved_model_job import run_saved_model_job

        return run_saved_model_job(argv, prog, schema, stage, work)

    return main
