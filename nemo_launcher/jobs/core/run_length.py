"""A run sized in trainer.max_epochs gets its trainer.max_steps from the data set, before anything is built.

    cfg, sizing = run_in_steps(cfg, recipe)    # core/program.py; sizing: None for a run sized in steps
    print(sizing)   # max_epochs=10 over 96 samples at global batch 16 = 60 optimizer steps

The family's recipe counts one pass over its training data (Recipe.epoch_samples, from the shards or files it will
read) and its schema turns epochs into steps and checks the schedule against them (sized_by_epochs; the rule is
the contract's epochs.py, which the launcher runs too where it can count the data). Every part of the trainer then
reads the derived trainer.max_steps: the schedule, checkpoint and validation steps, the sampler, the summary. A
rerun derives the same number from the same data, so a resumed run ends at the step an uninterrupted one would.
"""


def run_in_steps(cfg, recipe):
    """(cfg sized in optimizer steps, the EpochSizing it was derived with or None)."""
    if getattr(cfg.trainer, "max_epochs", None) is None:
        return cfg, None
    # The schema accepts max_epochs only for families whose recipe counts their samples.
    assert recipe.epoch_samples is not None, f"{type(cfg).__name__} accepts max_epochs; its recipe counts no samples"
    return cfg.sized_by_epochs(recipe.epoch_samples(cfg))
