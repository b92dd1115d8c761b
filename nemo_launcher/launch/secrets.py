"""Secrets travel by reference: a file path goes into the script, the value is read on the node when the job
starts, so no key ever lands in a script, a resolved config, launcher_cmd.log or the ledger.

    secret_files:                        # conf/config.yaml; NAME -> file whose first line is the value
      HF_TOKEN: /home/me/.secrets/hf_token
    wandb_api_key_file: /home/me/.secrets/wandb   # the same, for WANDB_API_KEY

An environment value whose name looks like a secret (`*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`) is
refused with that fix, whether it comes from env_vars, a cloud preset or the command line.
"""

import re
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import config_error

_SECRET_NAME = re.compile(r"(_API_KEY|_TOKEN)$|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
HIDDEN = "<hidden>"  # shown instead of a secret's value in messages


def looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(str(name)))


def secret_refusal(key: str, name: str):
    """The ConfigError for a secret given as an env value at `key`: names the key, hides the value, gives the fix."""
    return config_error(
        key,
        HIDDEN,
        f"secrets are never written into scripts or logs: put the value in a file only you can read and set "
        f"secret_files.{name}=/path/to/that/file (read on the node when the job starts)",
    )


def refuse_secret_values(pairs: Iterable[tuple[str, str]], key: str) -> None:
    """Env values are written into scripts in clear: one whose name looks like a secret is refused."""
    for name, _ in pairs:
        if looks_secret(name):
            raise secret_refusal(f"{key}.{name}", name)


def secret_override(overrides: Iterable[str]):
    """The refusal for the first command-line override that sets a secret-looking env value, or None."""
    for word in overrides:
        key = word.lstrip("+~").split("=", 1)[0]
        name = key.rsplit(".", 1)[-1]
        if "=" in word and key.startswith(("env_vars.", "env_preset.env_vars.")) and looks_secret(name):
            return secret_refusal(key, name)
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
