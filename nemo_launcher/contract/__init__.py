"""What both sides agree on: the schema of every job program's config, file names and markers.

The launch side binds each stage's resolved config to its job program's schema before anything is written or
submitted; the job program binds the same file to the same schema when it starts. A rule written here is
therefore checked once, at launch, and can never be refused by the job after the queue wait. Standard library
and PyYAML only (model_facts.py reads a .nemo's model_config.yaml; both sides install PyYAML): login nodes have
no torch, and job programs import this before anything heavy.
"""

# Written into exp_manager.explicit_log_dir by the trainer when it stopped before max_steps (time limit,
# trainer.max_time, SIGTERM/SIGUSR1) after saving a checkpoint, and removed when it reaches max_steps. The
# Slurm script requeues the job while it exists (run.auto_requeue), so a long run goes on by itself.
RESUME_MARKER = "RESUME_NEEDED"

# A job program that writes into a run directory (training, fine-tuning, PEFT, conversion, evaluation, export)
# holds this lock file there while it runs: one writer per directory. It records who holds it (user, host, pid,
# Slurm job id, start time) as JSON; a second writer reads it to say whose job is in the way.
RUN_LOCK_FILE = ".nemo_launcher.lock"

# Exit status of a job program that found its run directory in use by another live job and stopped before
# writing anything (sysexits' EX_TEMPFAIL: try again once the other job has ended).
RUN_DIRECTORY_IN_USE_EXIT_CODE = 75

# Exit status of a job program that stopped because it could not write its results: the file system is full
# (or its quota is), or the job may not write there. The newest complete checkpoint is kept and RESUME_MARKER
# removed, so the Slurm script does not requeue a job that would hit the same wall (sysexits' EX_IOERR).
STORAGE_FAULT_EXIT_CODE = 74

# The training checkpoints: `<explicit_log_dir>/checkpoints/step-<N>/`, complete once this marker is in the folder
# (written last). The trainer writes them; the conversion and the preflight's free-space check read them.
CHECKPOINT_STEP_PREFIX = "step-"
CHECKPOINT_COMPLETE_MARKER = "COMPLETE"
