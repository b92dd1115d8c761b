"""Secrets travel by reference: checked at launch, read on the node when the job starts, and never written into any
file the launcher writes (scripts, resolved configs, launcher_cmd.log, the ledger)."""

import os
import stat
import subprocess
import sys
from pathlib import Path

from .test_submission import _fake_slurm, fake_path  # noqa: F401  (fixture)

HF_VALUE, WANDB_VALUE = "hf-s3cr3t-V4LUE", "wandb-K3Y-0123"


def _secret(path: Path, value: str, mode: int = 0o600) -> Path:
    path.write_text(value + "\n")
    path.chmod(mode)
    return path


def _overrides(tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    return [
        f"+secret_files.HF_TOKEN={_secret(secrets / 'hf', HF_VALUE)}",
        f"wandb_api_key_file={_secret(secrets / 'wandb', WANDB_VALUE)}",
    ]


def _every_written_file(results: Path):
    return [p for p in results.rglob("*") if p.is_file()]


def test_no_written_file_holds_a_secret(fake_path, launch, tmp_path):  # noqa: F811
    _fake_slurm(fake_path, 'echo "$((500 + n))"')
    results = tmp_path / "results"
    overrides = ["stages=[training,conversion]", "training=gpt3/5b", *_overrides(tmp_path)]
    assert launch(overrides, debug=True, results=results)[0] == 0
    code, out, err = launch(overrides, debug=False, results=results)
    assert code == 0, err
    files = _every_written_file(results)
    assert any(p.parent.name == ".ledger" for p in files) and any(p.name == "launcher_cmd.log" for p in files)
    for path in files:
        text = path.read_bytes()
        assert HF_VALUE.encode() not in text and WANDB_VALUE.encode() not in text, path
    assert HF_VALUE not in out + err and WANDB_VALUE not in out + err


PROBE = """#!{python}
import json, os, sys
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump({{"hf": os.environ.get("HF_TOKEN"), "wandb": os.environ.get("WANDB_API_KEY")}}, out)
"""


def _run_script(script: Path, tmp_path: Path):
    probe = tmp_path / "probe"
    probe.write_text(PROBE.format(python=sys.executable))
    probe.chmod(probe.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, NEMO_LAUNCHER_PYTHON=str(probe), PROBE_OUT=str(tmp_path / "probe.json"))
    return subprocess.run(["bash", str(script)], cwd=script.parent, env=env, capture_output=True, text=True)


def test_the_job_reads_the_secret_when_it_starts_and_stops_when_it_cannot(launch, tmp_path):
    results = tmp_path / "results"
    overrides = ["stages=[training]", "training=gpt3/tiny", "cluster_type=interactive", *_overrides(tmp_path)]
    assert launch(overrides, debug=True, results=results)[0] == 0
    (script,) = results.rglob("*_submission.sh")
    result = _run_script(script, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "probe.json").read_text() == f'{{"hf": "{HF_VALUE}", "wandb": "{WANDB_VALUE}"}}'
    # On a node where the file is empty (or missing), the job stops before the program starts.
    (tmp_path / "secrets" / "hf").write_text("")
    (tmp_path / "probe.json").unlink()
    result = _run_script(script, tmp_path)
    assert result.returncode == 1 and "HF_TOKEN" in result.stderr and "empty or unreadable" in result.stderr
    assert not (tmp_path / "probe.json").exists()


def test_secret_files_are_checked_at_launch(launch, tmp_path):
    results = tmp_path / "results"
    base = ["stages=[training]", "training=gpt3/5b"]
    empty = _secret(tmp_path / "empty", "")
    code, _, err = launch(base + [f"+secret_files.HF_TOKEN={empty}"], results=results)
    assert code == 2 and "secret_files.HF_TOKEN" in err and "first line is empty" in err
    code, _, err = launch(base + ["+secret_files.HF_TOKEN=relative/file"], results=results)
    assert code == 2 and "absolute path" in err
    assert not results.exists()
    shared = _secret(tmp_path / "shared", "value", mode=0o644)
    code, _, err = launch(base + [f"wandb_api_key_file={shared}"], results=results)
    assert code == 0 and "other users can read this secret" in err and "chmod 600" in err


def test_a_secret_on_the_command_line_is_refused_before_hydra_writes_anything(tmp_path):
    from nemo_launcher.launch.resolvers import REPO_ROOT

    argv = [
        sys.executable,
        "main.py",
        "-m",
        "stages=[training]",
        "training=gpt3/5b",
        "+env_vars.GITHUB_TOKEN=ghp_abc",
        "training.model.micro_batch_size=1,2",
        f"base_results_dir={tmp_path}/r",
    ]
    result = subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, env=dict(os.environ, NEMO_LAUNCHER_DEBUG="1")
    )
    assert result.returncode == 2 and "secret_files.GITHUB_TOKEN" in result.stderr
    assert "ghp_abc" not in result.stderr and not (tmp_path / "r").exists()


# Credentials by name: each cloud's storage keys and connection strings, and the tokens of the model hubs.
SECRET_NAMES = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON",
    "GCS_HMAC_KEY_ID",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "NGC_API_KEY",
    "NGC_CLI_API_KEY",
    "WANDB_API_KEY",
    "WANDB_KEY",
    "DB_PASS",
]
# Names that hold no credential, or the path of a credentials file (a reference, as secret_files are).
PLAIN = [
    ("NCCL_IB_TIMEOUT", "22"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("GOOGLE_APPLICATION_CREDENTIALS", "/home/me/.config/gcloud/key.json"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/home/me/.aws/credentials"),
    ("HF_HOME", "/lustre/hf"),
]
# Credentials by value, under names that say nothing.
SECRET_VALUES = [
    "AKIAIOSFODNN7EXAMPLE",
    "hf_abcdefghijklmnopqrstuvwxyz012345",
    "nvapi-abcdefghijklmnopqrstuvwxyz",
    "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net",
    "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=abc%3D",
    "-----BEGIN RSA PRIVATE KEY-----",
    "https://me:pw@example.com/pile/",
]


def test_credential_names_and_values_are_recognised():
    from nemo_launcher.launch.secrets import looks_secret

    assert [name for name in SECRET_NAMES if not looks_secret(name, "x")] == []
    assert [name for name, value in PLAIN if looks_secret(name, value)] == []
    assert [value for value in SECRET_VALUES if not looks_secret("SOURCE", value)] == []
    # A credentials *file* name holding something else than a path is the credential itself.
    assert looks_secret("GOOGLE_APPLICATION_CREDENTIALS", '{"type": "service_account"}')


def test_a_credential_in_any_command_line_value_is_refused_hidden():
    from nemo_launcher.launch.secrets import secret_override

    refusal = secret_override(["stages=[data_preparation]", "data_preparation.the_pile_url=https://me:pw@host/p/"])
    assert refusal is not None and "the_pile_url='<hidden>'" in str(refusal) and "pw" not in str(refusal)
    refusal = secret_override(["+training.run.env_vars.AZURE_STORAGE_KEY=abc"])
    assert refusal is not None and "secret_files.AZURE_STORAGE_KEY" in str(refusal)
    assert secret_override(["stages=[training]", "+env_vars.NCCL_DEBUG=INFO", "training=gpt3/5b"]) is None


def test_unsetting_a_secret_named_variable_is_no_secret():
    from nemo_launcher.launch.secrets import secret_override

    assert secret_override(["env_vars.HF_TOKEN=null", "+env_vars.WANDB_API_KEY=''"]) is None
