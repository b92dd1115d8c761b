"""What a training does when no complete checkpoint of its run survives verification: the rule of
`exp_manager.on_all_checkpoints_damaged`, bound at launch by the training and tuning schemas and read by the job.

    exp_manager:
      on_all_checkpoints_damaged: fail      # or start_over

Every save records each file's size and CRC-32 in its COMPLETE marker; a resume checks the newest complete
checkpoint against it and falls back to the newest one that verifies, whatever this key says (one warning line
names the damaged file). The key decides only what happens when none is left:
- fail (the default): the job stops with DAMAGED_CHECKPOINTS_EXIT_CODE and one `Error:` line naming the damaged
  files and the fix; it is not requeued, since every attempt would meet the same files. Hours of training are worth
  a look before they are thrown away.
- start_over: the job warns, sets the damaged folders aside (`step-<N>.damaged`) and trains from step 0.
Standard library only.
"""

from typing import Literal

from . import STORAGE_FAULT_EXIT_CODE

AllCheckpointsDamaged = Literal["fail", "start_over"]

ALL_CHECKPOINTS_DAMAGED_KEY = "exp_manager.on_all_checkpoints_damaged"

# The files a job must read cannot be read as written: sysexits' EX_IOERR, the code of a checkpoint that cannot be
# written. Neither is requeued (the Slurm script requeues only while RESUME_MARKER exists, and the job removes it).
DAMAGED_CHECKPOINTS_EXIT_CODE = STORAGE_FAULT_EXIT_CODE
