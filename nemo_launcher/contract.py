"""Names both sides agree on. Job programs may import this module; it imports nothing."""

# Written into exp_manager.explicit_log_dir by the trainer when it stopped before max_steps (time limit,
# trainer.max_time, SIGTERM/SIGUSR1) after saving a checkpoint, and removed when it reaches max_steps. The
# Slurm script requeues the job while it exists (run.auto_requeue), so a long run goes on by itself.
RESUME_MARKER = "RESUME_NEEDED"
