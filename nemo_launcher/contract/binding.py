"""Binding a resolved stage config (plain dicts and lists) to a schema: typed, frozen dataclasses.

    cfg = bind_stage(TrainingConfig, section, "training")   # unknown key, wrong type, bad value -> JobConfigError

A schema is a dataclass whose fields carry the YAML key names; nested sections are nested dataclasses.
`bind` refuses unknown keys (suggesting the nearest valid one), missing required keys, values of the wrong
type and values outside a `Literal`'s choices; then each dataclass's `check(key)` applies its own rules,
inner sections first. The launcher and the job program call the same function on the same data, so every
message names the key as the user types it on the command line (`training.model.num_layers`).
"""

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Union

_NO_VALUE = object()


class JobConfigError(ValueError):
    """A user error in a stage config. The message names the key as typed, the value, and what is allowed."""


def config_fault(key: str, value: Any, fix: str) -> JobConfigError:
    """The one message shape of every schema rule: `key=value: fix`."""
    shown = "" if value is _NO_VALUE else f"={value!r}"
    return JobConfigError(f"{key}{shown}: {fix}")


def nearest(word: str, choices: Sequence[str]) -> list[str]:
    import difflib  # only a mistake pays for it

    return difflib.get_close_matches(str(word), [str(c) for c in choices], n=3, cutoff=0.6)


def _suggestion(word: str, choices: Sequence[str]) -> str:
    close = nearest(word, choices)
    return f"did you mean {' or '.join(close)}? " if close else ""


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(schema: type) -> dict[str, Any]:
    # get_type_hints evaluates every annotation; once per class keeps a dry run's binding cheap.
    if schema not in _HINTS:
        _HINTS[schema] = typing.get_type_hints(schema)
    return _HINTS[schema]


def bind(schema: type, data: Mapping[str, Any], key: str = ""):
    """Builds `schema` from `data`; `key` is the dotted prefix used in messages (the section's full key)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise config_fault(
            key or "<top level>", data, f"expected a section (a mapping of keys), got {type(data).__name__}"
        )
    fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
    unknown = [name for name in data if name not in fields]
    if unknown:
        name = unknown[0]
        raise config_fault(
            _join(key, name),
            _NO_VALUE,
            f"unknown key; {_suggestion(name, list(fields))}"
            f"valid keys under {key or 'the top level'}: {', '.join(fields)}",
        )
    hints = _hints(schema)
    values = {}
    for name, field in fields.items():
        full = _join(key, name)
        if name in data:
            values[name] = convert(hints[name], data[name], full)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise config_fault(full, _NO_VALUE, "missing required key; set it in the YAML or on the command line")
    instance = schema(**values)
    check = getattr(instance, "check", None)
    if check is not None:
        check(key)
    return instance


def bind_stage(schema: type, section: Mapping[str, Any], stage: str):
    """A whole stage section (`training:`, `conversion:`, ...), with keys named from the stage down."""
    return bind(schema, section, stage)


class StageSchema:
    """Mixed into the top-level schema of a stage section, which names its stage as it subclasses:

        class ExportConfig(StageSchema, stage="export"): ...

    `from_dict(section)` binds the section with keys named from that stage down; a schema several stages share
    is bound with the stage being validated (`from_dict(section, "peft")`)."""

    stage = ""

    def __init_subclass__(cls, stage: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if stage is not None:
            cls.stage = stage

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], stage: str | None = None):
        return bind_stage(cls, data, stage or cls.stage)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


def convert(hint: Any, value: Any, key: str) -> Any:
    """`value` as the type `hint` describes, or a JobConfigError naming `key`."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union or origin is types.UnionType:  # Optional[X] and X | None alike
        if value is None and type(None) in args:
            return None
        candidates = [a for a in args if a is not type(None)]
        errors = []
        for candidate in candidates:
            try:
                return convert(candidate, value, key)
            except JobConfigError as error:
                errors.append(error)
        if len(errors) == 1:
            raise errors[0]
        raise config_fault(key, value, f"expected {describe(hint)}")
    if origin is typing.Literal:
        if value in args and type(value) in (type(a) for a in args if a == value):
            return value
        choices = ", ".join(str(a) for a in args)
        close = nearest(value, [str(a) for a in args]) if isinstance(value, str) else []
        hint_text = f" (nearest: {', '.join(close)})" if close else ""
        raise config_fault(key, value, f"choose one of {choices}{hint_text}")
    if dataclasses.is_dataclass(hint):
        return bind(hint, value, key)
    if origin in (list, list):
        if not isinstance(value, (list, tuple)):
            raise config_fault(key, value, "expected a list, e.g. [a, b]")
        (item,) = args or (Any,)
        return [convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, dict):
        if not isinstance(value, Mapping):
            raise config_fault(key, value, "expected a mapping of keys to values")
        return dict(value)
    if isinstance(hint, type) and getattr(hint, "parse", None) is not None:
        return hint.parse(value, key)  # a value type of its own, e.g. a duration
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise config_fault(key, value, "expected true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise config_fault(key, value, "expected an integer")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise config_fault(key, value, "expected a number")
    if hint is str:
        if isinstance(value, str):
            return value
        raise config_fault(key, value, "expected a string")
    raise TypeError(f"schema type {hint!r} of {key} is not supported by bind()")


def describe(hint: Any) -> str:
    names = []
    for arg in typing.get_args(hint) or (hint,):
        if arg is type(None):
            names.append("null")
        elif typing.get_origin(arg) is typing.Literal:
            names.append("one of " + ", ".join(str(a) for a in typing.get_args(arg)))
        else:
            names.append(
                {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
                    arg, getattr(arg, "__name__", str(arg))
                )
            )
    return " or ".join(names)


# Rules many schemas share. Each raises the usual `key=value: fix` error.


def positive(key: str, value) -> None:
    if value is None or value <= 0:
        raise config_fault(
            key, value, "must be a positive integer" if isinstance(value, int) else "must be a positive number (> 0)"
        )


def non_negative(key: str, value) -> None:
    if value is None or value < 0:
        raise config_fault(key, value, "must be >= 0")


def fraction(key: str, value) -> None:
    """A probability such as a dropout rate: 0 <= value < 1."""
    if not 0.0 <= value < 1.0:
        raise config_fault(key, value, "must be in [0, 1), e.g. 0.1")


def positive_fields(instance, key: str, *names: str) -> None:
    for name in names:
        positive(_join(key, name), getattr(instance, name))


def non_negative_fields(instance, key: str, *names: str) -> None:
    for name in names:
        non_negative(_join(key, name), getattr(instance, name))


def field_fault(section, key: str, name: str, fix: str) -> JobConfigError:
    """The `key=value: fix` error of one field of a section (`key` is the section's): `key.name=<its value>: fix`."""
    return config_fault(f"{key}.{name}", getattr(section, name), fix)


def must_be_one(section, key: str, *names: str, fix: str) -> None:
    """Each named field must be 1 (a feature this stage does not split over, e.g. pipeline parallelism)."""
    for name in names:
        if getattr(section, name) != 1:
            raise field_fault(section, key, name, fix)


def no_pipeline_parallel(model, key: str, fix: str) -> None:
    """A model section whose stage runs without pipeline stages: pipeline_model_parallel_size must be 1."""
    must_be_one(model, key, "pipeline_model_parallel_size", fix=fix)


def absolute_path_fields(section, key: str, *names: str, fix: str = "must be an absolute path") -> None:
    """Each named path field is absolute (a null one is left to its own rules)."""
    for name in names:
        value = getattr(section, name)
        if value is not None and not PurePosixPath(value).is_absolute():
            raise field_fault(section, key, name, fix)
