"""The data-step framework every data preparation step builds on, whatever its family: the step's config read
from the resolved data_preparation YAML (config.py: StepConfig, load_bound, run_step, this_task_items), the summary
it ends with (step_report.py), downloads with retries (fetch.py) and Git LFS listings (git_lfs_listing.py). The
text pipeline (data/), the image-text steps (multimodal/), vision's and DiT's data steps and the FID evaluation
steps all run on it; it imports only common/."""
