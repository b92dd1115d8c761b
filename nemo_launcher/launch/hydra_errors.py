"""Hydra's own errors in the launcher's words: one line naming the key, the value and the fix, exit 2.

Hydra reports a mistake on the command line (a key that does not exist, a comma it reads as a sweep, a value it
cannot parse) with its own text, a stack trace hint and exit 1, where every other mistake gets the launcher's
`Error: key=value: fix` and exit 2. main.py runs Hydra inside `launcher_errors()`, which turns those into the
launcher's line; HYDRA_FULL_ERROR=1 or NEMO_LAUNCHER_FULL_ERROR=1 shows Hydra's own error and its traceback.

Launch side: imported by main.py on every run, so it loads nothing until an error needs it.
"""

import contextlib
import os
import sys

FULL_ERROR_VARIABLES = ("HYDRA_FULL_ERROR", "NEMO_LAUNCHER_FULL_ERROR")
# Top-level mappings of conf/config.yaml that take keys of the user's choosing (besides the schemas' own).
OPEN_TOP_LEVEL = ("env_vars", "secret_files")
SHOWN_KEYS = 12


@contextlib.contextmanager
def launcher_errors():
    """Runs the block with Hydra raising its errors (HYDRA_FULL_ERROR=1), and reports each as the launcher does."""
    if any(os.environ.get(name) for name in FULL_ERROR_VARIABLES):
        yield  # the user asked for Hydra's own report and traceback
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; we print one line instead
    try:
        yield
    except Exception as error:  # noqa: BLE001  (only Hydra's and OmegaConf's own are reported; the rest re-raised)
        message = explain(error)
        if message is None:
            raise
        print(f"Error: {message}", file=sys.stderr)
        sys.exit(2)


def explain(error: BaseException) -> str | None:
    """The launcher's one line for a Hydra or OmegaConf error raised while composing, or None for any other."""
    from hydra.errors import ConfigCompositionException, OverrideParseException
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    if isinstance(error, OverrideParseException):
        return _unparsable(error.override, error.message)
    if isinstance(error, ConfigCompositionException):
        text = str(error)
        first = _first_line(text)
        if first.startswith("Ambiguous value for argument"):
            return _sweep_without_multirun(first.split("argument", 1)[1].strip().strip("'"))
        cause = error.__cause__
        if isinstance(cause, (ConfigKeyError, AttributeError)) and getattr(cause, "full_key", None):
            typed = first.split("'", 2)[1] if first.startswith("Could not override '") else cause.full_key
            value = _override_value(text)
            return no_such_key(typed, cause.full_key, value, getattr(cause, "parent_node", None))
        return f"{_first_line(text)} ({_first_line(str(cause)) if cause else 'Hydra'})"
    if isinstance(error, OmegaConfBaseException):
        return f"{getattr(error, 'full_key', '') or 'config'}: {_first_line(getattr(error, 'msg', str(error)))}"
    return None


def no_such_key(typed: str, missing: str, value: str | None, section) -> str:
    """`a.b.c=v: no such key under a.b; nearest: ...` for the override `typed` (a.b.c) whose part `missing` (a.b.c,
    or a shorter a.x when a whole section is missing) does not exist in `section`; with the `+` form only where a
    new key is meaningful."""
    from ..contract.binding import nearest

    parent, _, name = missing.rpartition(".")
    shown = f"{typed}={value}" if value is not None else typed
    keys = [str(key) for key in section.keys() if str(key) != "hydra"] if hasattr(section, "keys") else []
    if parent and parent.rsplit(".", 1)[-1] in _open_sections():
        return f"{shown}: {parent} takes new keys with a leading +: +{typed}={value if value is not None else '...'}"
    where = f"under {parent}" if parent else "at the top level"
    if not keys:
        return f"{shown}: no such key: {parent or 'the value above it'} is not a section (it holds no keys)"
    close = nearest(name, keys)
    listing = ", ".join(keys[:SHOWN_KEYS]) + (", ..." if len(keys) > SHOWN_KEYS else "")
    near = f"did you mean {' or '.join(f'{parent}.{key}' if parent else key for key in close)}? " if close else ""
    return f"{shown}: no such key {where}; {near}keys {where}: {listing}"


def _open_sections() -> set[str]:
    """Names of sections whose keys are the user's (schema fields typed as a mapping: env_vars, ...)."""
    import dataclasses
    import importlib
    import pkgutil
    import typing

    from ..contract import schemas

    names = set(OPEN_TOP_LEVEL)
    for module_info in pkgutil.iter_modules(schemas.__path__):
        module = importlib.import_module(f"{schemas.__name__}.{module_info.name}")
        for item in vars(module).values():
            if not (isinstance(item, type) and dataclasses.is_dataclass(item)):
                continue
            for field in dataclasses.fields(item):
                hint = field.type
                origin = typing.get_origin(hint) if not isinstance(hint, str) else None
                if origin is dict or (isinstance(hint, str) and hint.startswith(("dict[", "dict"))):
                    names.add(field.name)
    return names


def _unparsable(override: str, message: str) -> str:
    key, has_value, value = override.partition("=")
    reason = _first_line(message.replace("LexerNoViableAltException: ", "unbalanced quote or bracket in "))
    if not has_value:
        return f"{override}: Hydra cannot read this override ({reason}): write it as key=value"
    if value[:1] in "'\"" and not value.endswith(value[0]):
        return f"{override}: the quote that opens this value is never closed ({reason}): {override}{value[0]}"
    quoted = f'{key}="{value}"' if "'" in value else f"{key}='{value}'"
    return (
        f"{override}: Hydra cannot read this value ({reason}); quote a value holding =, quotes, brackets or spaces, "
        f'and close every quote: {quoted} (inside the shell\'s own quotes: "{quoted}")'
    )


def _sweep_without_multirun(override: str) -> str:
    key, _, value = override.partition("=")
    return (
        f"{override}: Hydra reads an unquoted comma as a sweep over several values; for one value holding commas "
        f"quote it: {key}='{value}' (a list: {key}=[{value}]; a sweep: add -m)"
    )


def _override_value(text: str) -> str | None:
    """The value of `To append to your config use +key=value` in Hydra's message, when it gives one."""
    marker = "To append to your config use +"
    if marker not in text:
        return None
    return text.split(marker, 1)[1].split("=", 1)[1].strip() if "=" in text.split(marker, 1)[1] else None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
