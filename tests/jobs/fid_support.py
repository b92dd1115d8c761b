"""Stand-ins for the scoring models of the FID/CLIP evaluation (nothing is downloaded); they live with the job
programs, since the tiny data preparation writes them too."""

from nemo_launcher.jobs.fid_evaluation.standins import write_random_inception, write_tiny_clip

__all__ = ["write_random_inception", "write_tiny_clip"]
