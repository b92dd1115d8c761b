"""The `main` of a family's train.py and convert.py, built from names: the schema it binds and where the heavy
pieces (recipe, parts builder, module class, converter) live.

    main = training_main("python3 -m nemo_launcher.jobs.clip.train", ClipTrainingConfig,
                         "nemo_launcher.jobs.clip.recipe", recipe="clip_recipe", build="build_clip_parts",
                         module="ClipModule")
    main = conversion_main("nemo_launcher.jobs.bert.convert", BertConversionConfig,
                           "nemo_launcher.jobs.bert.converter", "BERT")

Nothing but the standard library and the contract is imported here or by an entry module: torch, megatron-core
and the family's recipe load only once the program runs, after the core has installed its log filters, and a
helper process that dist_checkpointing spawns (it re-imports the entry module) pays nothing for them. The trainer
and the conversion flow themselves are core/program.py and core/conversion.py.
"""

import importlib
from collections.abc import Callable, Sequence

Main = Callable[[Sequence[str] | None], int]


def _attribute(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def training_main(
    prog: str, schema, recipe_module: str, recipe: str, build: str | None = None, module: str | None = None
) -> Main:
    """run_program with the pieces `recipe_module` names: `recipe` is a Recipe, or a function of the bound config
    returning one; `build` replaces parts.build_parts and `module` the TrainingModule class (a family that trains
    its own kind of model names both)."""

    def load_recipe(cfg):
        from .recipe import Recipe

        found = _attribute(recipe_module, recipe)
        return found if isinstance(found, Recipe) else found(cfg)

    def build_parts(*args, **kwargs):
        return _attribute(recipe_module, build)(*args, **kwargs)

    def module_class(parts):
        return _attribute(recipe_module, module)(parts)

    def main(argv: Sequence[str] | None = None) -> int:
        from .program import run_program

        return run_program(
            argv,
            prog,
            schema,
            load_recipe,
            build=build_parts if build else None,
            module_class=module_class if module else None,
        )

    return main


def conversion_main(program: str, schema, family_module: str, family: str) -> Main:
    """run_conversion with the ConversionFamily `family` of `family_module`, imported once the config is bound."""

    def main(argv: Sequence[str] | None = None) -> int:
        from .conversion import run_conversion  # torch: only once the program runs

        return run_conversion(argv, program, schema, lambda: _attribute(family_module, family))

    return main
