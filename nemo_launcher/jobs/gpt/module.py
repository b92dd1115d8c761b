"""Where the GPT trainer's loss used to live; the trainer is now core/ (the LightningModule: core/module.py, the
loss: core/steps.py). Kept for importers outside this package (tests/jobs/test_sft.py) until they move."""
from ..core.steps import masked_token_loss  # noqa: F401
