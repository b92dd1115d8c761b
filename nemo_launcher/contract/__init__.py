"""What both sides agree on: the schema of every job program's config, file names and markers.

The launch side binds each stage's resolved config to its job program's schema before anything is written or
submitted; the job program binds the same file to the same schema when it starts. A rule written here is
therefore checked once, at launch, and can never be refused by the job after the queue wait. Standard library
only: login nodes have no torch, and job programs import this before anything heavy.
"""

# Written into exp_manager.explicit_log_dir by the trainer when it stopped before max_steps (time limit,
# trainer.max_time, SIGTERM/SIGUSR1) after saving a checkpoint, and removed when it reaches max_steps. The
# Slurm script requeues the job while it exists (run.auto_requeue), so a long run goes on by itself.
RESUME_MARKER = "RESUME_NEEDED"
