"""Frozen value classes for the sizing engine, without the dataclasses module.

`kvtier plan` must start in at most 3x `python -c pass` (bench/startup.py). Importing
dataclasses (which imports inspect) and generating the methods of the engine's classes cost
about as much as the rest of the command. A Record subclass declares its fields as
annotations with optional defaults, as a frozen dataclass does; Record's own methods read them
from one tuple that the subclass hook stores, so defining a class generates no code.
tests/unit/test_record.py checks construction, errors, equality, hashing, repr, immutability
and replace() against dataclasses.dataclass(frozen=True) on generated class shapes.
"""

from __future__ import annotations

# Not typing.TYPE_CHECKING: the plan command starts without importing typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar

    from typing_extensions import dataclass_transform

    R = TypeVar("R", bound="Record")
else:

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


_MISSING = object()
# Shared by every instance, as a dataclass refuses them (use a tuple or a MappingProxyType).
_MUTABLE_DEFAULTS = (list, dict, set)


class FrozenRecordError(AttributeError):
    """An assignment to a Record (like dataclasses.FrozenInstanceError)."""


@dataclass_transform(frozen_default=True)
class Record:
    """Base of a frozen value class: fields in declaration order, base classes' first."""

    _record_fields: ClassVar[tuple[tuple[str, object], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls._record_fields)
        # Not inspect.get_annotations: importing inspect is what this module saves.
        own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        for name, annotation in own.items():
            if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            # getattr, as dataclasses: a field redeclared bare keeps its base class's default.
            default = getattr(cls, name, _MISSING)
            if isinstance(default, _MUTABLE_DEFAULTS):
                raise ValueError(
                    f"{cls.__name__}.{name}: mutable default {type(default).__name__} is not "
                    "allowed; use a tuple or a MappingProxyType"
                )
            fields[name] = default
        after_default = None
        for name, default in fields.items():
            if default is _MISSING and after_default is not None:
                raise TypeError(
                    f"{cls.__name__}: field {name!r} without a default follows "
                    f"{after_default!r}, which has one"
                )
            if default is not _MISSING:
                after_default = name
        cls._record_fields = tuple(fields.items())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._record_fields
        name_of = type(self).__name__
        if len(args) > len(fields):
            raise TypeError(
                f"{name_of}() takes {len(fields)} positional arguments but {len(args)} were given"
            )
        put = object.__setattr__
        for (name, _), value in zip(fields, args, strict=False):
            if name in kwargs:
                raise TypeError(f"{name_of}() got multiple values for argument {name!r}")
            put(self, name, value)
        missing = []
        for name, default in fields[len(args) :]:
            value = kwargs.pop(name, default)
            if value is _MISSING:
                missing.append(name)
            else:
                put(self, name, value)
        if kwargs:
            raise TypeError(
                f"{name_of}() got an unexpected keyword argument {next(iter(kwargs))!r}"
            )
        if missing:
            raise TypeError(f"{name_of}() missing required arguments: {', '.join(missing)}")
        self.__post_init__()

    def __post_init__(self) -> None:
        """A subclass's checks, run once every field is set."""

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name, _ in self._record_fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self._record_fields)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r}")


def field_values(obj: Record) -> tuple[object, ...]:
    """A Record's values in field order (dataclasses.astuple, not recursing)."""
    return obj._values()


def field_defaults(cls: type[Record]) -> dict[str, object]:
    """The fields of a Record class that have a default, with it."""
    return {name: default for name, default in cls._record_fields if default is not _MISSING}


def replace(obj: R, /, **changes: Any) -> R:
    """A copy of `obj` with some fields changed (dataclasses.replace for a Record)."""
    values = {name: getattr(obj, name) for name, _ in obj._record_fields}
    unknown = changes.keys() - values.keys()
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(obj)(**values)
