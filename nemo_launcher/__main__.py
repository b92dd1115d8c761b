"""Follow and stop recorded pipelines (the logic is in nemo_launcher/launch/monitor.py):

    python3 -m nemo_launcher status [RUN] [--results DIR]
    python3 -m nemo_launcher logs RUN [STAGE] [-f] [--results DIR]
    python3 -m nemo_launcher cancel RUN [--results DIR]
    python3 -m nemo_launcher estimate <the overrides main.py takes> [--json]   (launch/estimate.py: predicted memory,
                                                                               step time and cost; writes nothing)

An installed package (pyproject.toml) has the same commands as `nemo-launcher status|logs|cancel ...`: its console
script calls main() below.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nemo_launcher.launch.errors import ConfigError, LauncherError

CONSOLE_SCRIPT = "nemo-launcher"  # pyproject.toml's [project.scripts] name for main()
_RUN_HELP = "a pipeline id (or a unique prefix), or a run or job name: the newest pipeline with it"


def _program_name() -> str:
    """How the user called us, for the usage line: the console script, or the module."""
    return CONSOLE_SCRIPT if Path(sys.argv[0]).name == CONSOLE_SCRIPT else "python3 -m nemo_launcher"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description="Follow and stop pipelines the launcher submitted, or predict what one will need before it runs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{status,logs,cancel,estimate}")
    status = commands.add_parser("status", help="the jobs of a pipeline, or one line per recent pipeline")
    status.add_argument("run", nargs="?", metavar="RUN", help=_RUN_HELP)
    logs = commands.add_parser("logs", help="print (or follow) the newest log of a pipeline's job")
    logs.add_argument("run", metavar="RUN", help=_RUN_HELP)
    logs.add_argument("stage", nargs="?", metavar="STAGE", help="a stage or job name (default: the job active last)")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job has ended (Ctrl-C stops)"
    )
    cancel = commands.add_parser("cancel", help="cancel every job of the pipeline still queued or running")
    cancel.add_argument("run", metavar="RUN", help=_RUN_HELP)
    estimate = commands.add_parser(
        "estimate", help="predicted memory per GPU, step time, MFU, time and cost of each training job; writes nothing"
    )
    estimate.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="as for main.py, e.g. training=gpt3/5b")
    estimate.add_argument("--json", action="store_true", help="one JSON object per training job")
    for command in (status, logs, cancel):
        command.add_argument(
            "--results",
            type=Path,
            default=None,
            metavar="DIR",
            help="the base_results_dir the pipeline used "
            "(default: $NEMO_LAUNCHER_RESULTS, else <repository>/results in a checkout)",
        )
    return parser


def _default_results(monitor) -> Path:
    """monitor's default results folder. An installed package (no conf/ beside it, so not a checkout) has no
    <repository>/results: there the folder must be named (its parent would be site-packages)."""
    from nemo_launcher.launch.resolvers import REPO_ROOT

    if not os.environ.get(monitor.RESULTS_ENV) and not (REPO_ROOT / "conf").is_dir():
        raise ConfigError(
            f"--results: not given and {monitor.RESULTS_ENV} is unset, and this nemo_launcher is installed in "
            f"{REPO_ROOT}, not a checkout with a results folder: pass --results <base_results_dir> or set "
            f"{monitor.RESULTS_ENV}"
        )
    return monitor.default_results_dir()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    # argparse stops collecting a positional list at the first option, so `estimate a=1 --json b=2` leaves b=2
    # over: the estimate takes those words as overrides too; every other command refuses them.
    args, left_over = parser.parse_known_args(argv)
    if left_over and (args.command != "estimate" or any(word.startswith("-") for word in left_over)):
        parser.error(f"unrecognized arguments: {' '.join(left_over)}")
    if args.command == "estimate":
        from nemo_launcher.launch.estimate import main as estimate

        return estimate([*args.overrides, *left_over], args.json)
    from nemo_launcher.launch import monitor

    try:
        results = args.results or _default_results(monitor)
        if args.command == "status":
            return monitor.status(results, args.run)
        if args.command == "logs":
            return monitor.logs(results, args.run, args.stage, args.follow)
        return monitor.cancel(results, args.run)
    except LauncherError as error:
        if os.environ.get("NEMO_LAUNCHER_FULL_ERROR"):
            raise
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
