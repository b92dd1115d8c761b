"""bind() reads `X | None` as it reads Optional[X]: the schemas may use either spelling (ruff's UP007/UP045 turn the
old one into the new)."""

from dataclasses import dataclass

import pytest

from nemo_launcher.contract.binding import JobConfigError, bind


@dataclass
class OldSpelling:
    steps: int | None = None
    name: str | None = "a"


@dataclass
class NewSpelling:
    steps: int | None = None
    name: str | None = "a"


@pytest.mark.parametrize("schema", [OldSpelling, NewSpelling])
def test_both_spellings_bind_the_same_values(schema):
    assert bind(schema, {"steps": 3, "name": None}, "run") == schema(steps=3, name=None)
    assert bind(schema, {}, "run") == schema()


@pytest.mark.parametrize("schema", [OldSpelling, NewSpelling])
def test_both_spellings_refuse_with_the_same_line(schema):
    with pytest.raises(JobConfigError, match=r"^run\.steps='x': expected an integer$"):
        bind(schema, {"steps": "x"}, "run")
