"""The resolved stage config a job program is started with, bound to typed dataclasses.

    path = config_path_from_argv(sys.argv[1:])          # --config <job dir>/<run.name>_hydra.yaml
    section = load_resolved_config(path)                  # plain dict, no ${...} left
    cfg = bind(MySchema, section)                         # typo or bad value -> JobConfigError

A schema is a dataclass whose fields carry their YAML key names; nested sections are nested
dataclasses. `bind` rejects unknown keys (naming the full key and listing the valid ones), missing
required keys, and values of the wrong type, so a typo in a 16-node job fails in its first second.
"""
import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union


class JobConfigError(ValueError):
    """A user error in the job's config: the message names the key as typed and says what is allowed."""


def config_path_from_argv(argv: Optional[List[str]], prog: Optional[str] = None) -> Path:
    parser = argparse.ArgumentParser(prog=prog, description="Runs one job from a resolved stage config.")
    parser.add_argument("--config", required=True, type=Path, help="the <run.name>_hydra.yaml the launcher wrote")
    return parser.parse_args(argv).config


def load_resolved_config(path: Path) -> Dict[str, Any]:
    """Reads the YAML with OmegaConf (so `1e-3` is a float, as the launcher meant it) into plain containers."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        raise JobConfigError(f"--config {path}: no such file")
    conf = OmegaConf.load(path)
    missing = sorted(OmegaConf.missing_keys(conf))
    if missing:
        raise JobConfigError(f"{path}: mandatory value missing (???) for {', '.join(missing)}")
    # The launcher resolves every interpolation before writing; one left means the file was hand-made.
    data = OmegaConf.to_container(conf, resolve=False)
    leftover = _find_interpolations(data, "")
    if leftover:
        raise JobConfigError(f"{path}: unresolved interpolation at {leftover[0][0]} = {leftover[0][1]!r}; "
                             "job configs must be fully resolved (the launcher writes them so)")
    if not isinstance(data, dict):
        raise JobConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _find_interpolations(value: Any, key: str) -> List[tuple]:
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _find_interpolations(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _find_interpolations(v, f"{key}[{i}]")]
    if isinstance(value, str) and "${" in value:
        return [(key, value)]
    return []


def bind(schema: type, data: Mapping[str, Any], key: str = "", strict: bool = True):
    """Builds `schema` (a dataclass) from `data`; `key` is the dotted prefix used in error messages.

    strict=False ignores keys the schema does not declare (for sections another program owns).
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise JobConfigError(f"{key or '<top level>'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(schema)}
    if strict:
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise JobConfigError(
                f"{_join(key, unknown[0])}: unknown key; valid keys under {key or 'the top level'}: {', '.join(sorted(fields))}"
            )
    hints = typing.get_type_hints(schema)
    values = {}
    for name, field in fields.items():
        full = _join(key, name)
        if name in data:
            values[name] = _convert(hints[name], data[name], full)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise JobConfigError(f"{full}: missing required key")
    instance = schema(**values)
    check = getattr(instance, "check", None)
    if check is not None:
        check(key)
    return instance


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        candidates = [a for a in args if a is not type(None)]
        errors = []
        for candidate in candidates:
            try:
                return _convert(candidate, value, key)
            except JobConfigError as error:
                errors.append(str(error))
        raise JobConfigError(errors[0] if len(errors) == 1 else f"{key}: {value!r} is none of {_describe(hint)}")
    if origin is typing.Literal:
        if value in args:
            return value
        raise JobConfigError(f"{key}: {value!r} is not one of {', '.join(repr(a) for a in args)}")
    if dataclasses.is_dataclass(hint):
        return bind(hint, value, key)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise JobConfigError(f"{key}: expected a list, got {value!r}")
        (item,) = args or (Any,)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Dict):
        if not isinstance(value, Mapping):
            raise JobConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise JobConfigError(f"{key}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise JobConfigError(f"{key}: expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise JobConfigError(f"{key}: expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise JobConfigError(f"{key}: expected a string, got {value!r}")
    raise TypeError(f"schema type {hint!r} of {key} is not supported by bind()")


def _describe(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(hint))
