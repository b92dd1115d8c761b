"""The interactive backend passes the backend contract (tests/launch/backend_contract.py): it runs each job's
script here with bash, so the contract's probe `python3` is the job program."""

from .backend_contract import BackendContract


class TestInteractiveContract(BackendContract):
    cluster_type = "interactive"
    runs_here = True
