"""Secrets travel by reference: a file path goes into the script, the value is read on the node when the job
starts, so no key ever lands in a script, a resolved config, launcher_cmd.log or the ledger.

    secret_files:                        # conf/config.yaml; NAME -> file whose first line is the value
      HF_TOKEN: /home/me/.secrets/hf_token
    wandb_api_key_file: /home/me/.secrets/wandb   # the same, for WANDB_API_KEY

An environment value whose name looks like a credential (API keys and tokens of W&B, Hugging Face and NGC,
cloud storage keys and connection strings of AWS, Azure and GCP, passwords), or whose value looks like one (an AWS
access key id, a Hugging Face or NGC key, an Azure account key or SAS signature, a private key, a URL holding a
password), is refused with that fix, whether it comes from env_vars, a stage's run.env_vars, a cloud preset or the
command line. A credential-looking value anywhere else on the command line is refused too: the launcher writes the
command into launcher_cmd.log and Hydra writes a sweep's overrides into multirun.yaml.
"""

import re
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import config_error

# Names of credentials. A trailing KEY or KEY_ID covers API keys (WANDB_API_KEY, NGC_CLI_API_KEY), cloud storage
# keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AZURE_STORAGE_KEY, AZURE_STORAGE_ACCOUNT_KEY, GCS HMAC keys);
# TOKEN covers HF_TOKEN, HUGGING_FACE_HUB_TOKEN, AWS_SESSION_TOKEN, AZURE_STORAGE_SAS_TOKEN; connection strings
# (AZURE_STORAGE_CONNECTION_STRING) carry an account key; CREDENTIALS (GOOGLE_APPLICATION_CREDENTIALS_JSON) a
# service account's private key.
_SECRET_NAME = re.compile(
    r"(KEY|KEY_ID|TOKEN|_SAS|_AUTH|_PASS|_PWD)$|SECRET|PASSWORD|PASSWD|CONNECTION_STRING|CONN_STR|CREDENTIAL"
    r"|PRIVATE_KEY",
    re.IGNORECASE,
)
# Names whose value is the path of a credentials file (GOOGLE_APPLICATION_CREDENTIALS, AWS_SHARED_CREDENTIALS_FILE):
# a reference, as secret_files are, and accepted when the value is an absolute path.
_FILE_REFERENCE_NAME = re.compile(r"(_FILE|_PATH|^GOOGLE_APPLICATION_CREDENTIALS)$", re.IGNORECASE)
# Values that are credentials whatever their name, and what each is.
_SECRET_VALUES = (
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "a Hugging Face token"),
    (re.compile(r"\bnvapi-[A-Za-z0-9_-]{20,}"), "an NGC API key"),
    (re.compile(r"AccountKey=|SharedAccessSignature=|[?&]sig=", re.IGNORECASE), "an Azure account key or SAS"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"://[^/\s:@]+:[^/\s@]+@"), "a password inside a URL"),
)
HIDDEN = "<hidden>"  # shown instead of a secret's value in messages


def looks_secret(name: str, value=None) -> bool:
    """Whether an environment variable NAME=value carries a credential, by its name or by its value."""
    name = str(name)
    if value is not None and secret_value_kind(str(value)):
        return True
    if not _SECRET_NAME.search(name):
        return False
    return not (_FILE_REFERENCE_NAME.search(name) and value is not None and str(value).startswith("/"))


def secret_value_kind(value: str) -> str | None:
    """What credential `value` holds ("an AWS access key id", ...), or None."""
    for pattern, kind in _SECRET_VALUES:
        if pattern.search(value):
            return kind
    return None


def secret_refusal(key: str, name: str):
    """The ConfigError for a secret given as an env value at `key`: names the key, hides the value, gives the fix."""
    return config_error(
        key,
        HIDDEN,
        f"secrets are never written into scripts or logs: put the value in a file only you can read and set "
        f"secret_files.{name}=/path/to/that/file (read on the node when the job starts)",
    )


def refuse_secret_values(pairs: Iterable[tuple[str, str]], key: str) -> None:
    """Env values are written into scripts in clear: one that looks like a secret, by name or value, is refused."""
    for name, value in pairs:
        if looks_secret(name, value):
            raise secret_refusal(f"{key}.{name}", name)


def secret_override(overrides: Iterable[str]):
    """The refusal for the first command-line override that sets a secret-looking env value (env_vars,
    env_preset.env_vars, <stage>.run.env_vars), or any value that holds a credential, or None."""
    for word in overrides:
        key, has_value, value = word.lstrip("+~").partition("=")
        if not has_value:
            continue
        name = key.rsplit(".", 1)[-1]
        text = value.strip("'\"")
        if text.lower() in ("", "null", "~"):
            continue  # unsets the variable: nothing is exported
        if f".{key}".rsplit(".", 2)[-2] == "env_vars" and looks_secret(name, text):
            return secret_refusal(key, name)
        kind = secret_value_kind(value)
        if kind is not None:
            return config_error(
                key,
                HIDDEN,
                f"holds {kind}, and the command line is written into launcher_cmd.log (a sweep's into "
                "multirun.yaml): keep credentials out of configs; a job gets them as environment variables from "
                "secret_files.NAME=/path/to/a/file/only/you/can/read",
            )
    return None


def secret_files(raw: Mapping, wandb_api_key_file) -> dict[str, str]:
    """NAME -> file, checked now (exists, a readable regular file, not empty) rather than on the node after the
    queue wait; warns once per file that others can read. The launch host may see other filesystems than the
    compute nodes: the job checks again when it starts."""
    files: dict[str, str] = {}
    for name, path in (raw or {}).items():
        if path is None:
            continue
        if not str(name).replace("_", "a").isalnum() or str(name)[0].isdigit():
            raise config_error(f"secret_files.{name}", path, "environment variable names are letters, digits and _")
        files[str(name)] = str(path)
    if wandb_api_key_file:
        files["WANDB_API_KEY"] = str(wandb_api_key_file)
    for name, path in files.items():
        key = (
            "wandb_api_key_file"
            if name == "WANDB_API_KEY" and path == str(wandb_api_key_file)
            else f"secret_files.{name}"
        )
        _check_secret_file(key, Path(path))
    return files


def _check_secret_file(key: str, path: Path) -> None:
    if not path.is_absolute():
        raise config_error(key, str(path), "use an absolute path; jobs do not start in your working directory")
    try:
        info = path.stat()
        with open(path, "rb") as handle:
            first_line = handle.readline().strip()
    except FileNotFoundError:
        raise config_error(
            key, str(path), "no such file (checked from this host); create it with the value on its first line"
        ) from None
    except IsADirectoryError:
        raise config_error(key, str(path), "is a directory; name the file whose first line is the value") from None
    except PermissionError:
        raise config_error(key, str(path), "is not readable by you; fix its permissions (chmod 600)") from None
    if not stat.S_ISREG(info.st_mode):
        raise config_error(key, str(path), "is not a regular file")
    if not first_line:
        raise config_error(key, str(path), "its first line is empty; write the value on the first line")
    if info.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        print(f"Warning: {key}={str(path)!r}: other users can read this secret; chmod 600 {path}", file=sys.stderr)


def export_lines(files: Mapping[str, str], quote) -> list:
    """Shell lines that read each secret on the node. A plain assignment (not `export NAME=$(...)`, whose own
    status hides a failed read from `set -e`) stops the job when the file cannot be read; an empty value too."""
    lines = []
    for name, path in files.items():
        lines += [
            f'{name}="$(head -n 1 {quote(path)})"',
            f'[[ -n "${{{name}}}" ]] || '
            f"{{ echo {quote(f'{name}: {path} is empty or unreadable on this node')} >&2; exit 1; }}",
            f"export {name}",
        ]
    return lines
