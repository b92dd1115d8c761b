"""Writes and submits a search's plan as the launcher submits a pipeline: a dry run writes the job directories and
prints the plan; a real run checks the run directories, holds the run lock, records a ledger and submits all or
nothing (pipeline.py's pieces, reused as they are)."""

from collections.abc import Sequence

from ..pipeline import Plan, format_plan, submit_plan, write_plan
from ..run_directories import check_run_directories
from ..submissions import dry_run_root, guard_live_runs


def submit(plan: Plan, argv: Sequence[str]) -> None:
    if plan.context.debug:
        root = dry_run_root(plan)
        if root is None:
            check_run_directories(plan, real_run=False)
        write_plan(plan, argv, root)
        print(format_plan(plan, submit_plan(plan)), flush=True)
        return
    plan.backend.check_environment()
    check_run_directories(plan, real_run=True)
    from ..ledger import open_ledger
    from ..monitor import follow_up_commands
    from ..run_lock import hold_run_lock

    with hold_run_lock(plan, argv):
        guard_live_runs(plan, False)
        write_plan(plan, argv)
        ledger = open_ledger(plan, argv)
        submitted = submit_plan(plan, ledger)
    print(format_plan(plan, submitted), flush=True)
    print(follow_up_commands(ledger.id, plan.context.base_results_dir), flush=True)
