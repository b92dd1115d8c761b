"""The BCP backend passes the backend contract (tests/launch/backend_contract.py). Its scripts call `bcprun`: the
stand-in from test_quoting_bcp.py records its argv and runs `--cmd` through a shell with the `--env` pairs set,
as bcprun does, so the probe `python3` it finds is the job program."""

import os
from pathlib import Path

from .backend_contract import REAL_PYTHON, BackendContract, write_tool
from .test_quoting_bcp import FAKE_BCPRUN

# As bcprun does, the stand-in exits with the status of the command it ran (test_quoting_bcp's raises instead).
_RUN_COMMAND = 'subprocess.run(["sh", "-c", options["--cmd"]], env=environment, check=True)'
assert _RUN_COMMAND in FAKE_BCPRUN
BCPRUN = FAKE_BCPRUN.replace(
    _RUN_COMMAND, 'sys.exit(subprocess.run(["sh", "-c", options["--cmd"]], env=environment).returncode)'
)


class TestBcpContract(BackendContract):
    cluster_type = "bcp"
    runs_here = True

    def tools(self, tmp: Path) -> dict[str, str]:
        bin_dir = tmp / "bcp_bin"
        write_tool(bin_dir, "bcprun", BCPRUN.format(python=REAL_PYTHON))
        return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "BCPRUN_OUT": str(tmp / "bcprun.jsonl")}
