"""One helper for pulling typed fields out of parsed JSON, with errors that say where.

Every metadata document cuzarr reads goes through :class:`JsonReader`, so every error names the
document, the field and the bad value in the same words, for example::

    Failed to parse 'level' in zarr.json of 'temp/t2m': expected int, got '5'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cuzarr.errors import MetadataError

__all__ = ["MISSING", "JsonReader", "describe", "load_json_document"]

_INT64_MAX = 2**63 - 1


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def describe(value: object) -> str:
    """Return a short ``repr`` of a JSON value for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_json_document(data: bytes, *, document: str, path: str) -> dict[str, Any]:
    """Decode a JSON object from bytes, naming the document and path on failure.

    Parameters
    ----------
    data : bytes
        The raw document.
    document : str
        The document name, e.g. ``"zarr.json"``.
    path : str
        The node path inside the store, for the message.

    Returns
    -------
    dict
        The parsed object.

    Raises
    ------
    MetadataError
        If the bytes are not UTF-8 JSON or not a JSON object.
    """
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(
            f"Failed to parse {document} of '{path}': invalid JSON ({exc})"
        ) from exc
    if not isinstance(value, dict):
        raise MetadataError(
            f"Failed to parse {document} of '{path}': expected a JSON object, got {describe(value)}"
        )
    return value


@dataclass(frozen=True, slots=True)
class JsonReader:
    """Typed access to a JSON object, raising :class:`MetadataError` that names the field.

    Parameters
    ----------
    obj : Mapping
        The JSON object.
    document : str
        Name of the document, e.g. ``"zarr.json"``.
    path : str
        Node path inside the store.
    prefix : str
        Dotted prefix of nested fields (``"codecs[1].configuration"``).
    """

    obj: Mapping[str, Any]
    document: str
    path: str
    prefix: str = ""

    def where(self, field: str) -> str:
        """Return the dotted name of ``field`` for messages."""
        return f"{self.prefix}.{field}" if self.prefix else field

    def fail(self, field: str, expected: str, value: object) -> MetadataError:
        """Build the error for a field that does not hold what was expected."""
        return MetadataError(
            f"Failed to parse '{self.where(field)}' in {self.document} of '{self.path}': "
            f"expected {expected}, got {describe(value)}"
        )

    def child(self, field: str, obj: Mapping[str, Any]) -> JsonReader:
        """Return a reader for a nested object stored under ``field``."""
        return JsonReader(obj, self.document, self.path, self.where(field))

    def raw(self, field: str, default: object = MISSING) -> Any:
        """Return a field as it is, or ``default``; raise if required and absent."""
        if field in self.obj:
            return self.obj[field]
        if default is MISSING:
            raise MetadataError(
                f"Failed to parse {self.document} of '{self.path}': "
                f"required field '{self.where(field)}' is missing"
            )
        return default

    def str_(self, field: str, default: object = MISSING) -> str:
        """Return a string field."""
        value = self.raw(field, default)
        if not isinstance(value, str):
            raise self.fail(field, "str", value)
        return value

    def int_(
        self,
        field: str,
        default: object = MISSING,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        """Return an integer field (bools are refused), optionally bounded."""
        value = self.raw(field, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, "int", value)
        if minimum is not None and maximum is not None:
            if not minimum <= value <= maximum:
                raise self.fail(field, f"int in {minimum}..{maximum}", value)
        elif minimum is not None and value < minimum:
            raise self.fail(field, f"int >= {minimum}", value)
        elif maximum is not None and value > maximum:
            raise self.fail(field, f"int <= {maximum}", value)
        return value

    def only(self, allowed: Iterable[str], what: str = "") -> None:
        """Raise for the first field of the object that is not in ``allowed``.

        Parameters
        ----------
        allowed : iterable of str
            The field names the object may have.
        what : str
            What the object is, for the message (e.g. ``"codec 'zstd'"``).
        """
        names = tuple(allowed)
        for key, value in self.obj.items():
            if key not in names:
                owner = f" of {what}" if what else ""
                known = ", ".join(repr(n) for n in names) or "none"
                raise MetadataError(
                    f"Failed to parse '{self.where(key)}' in {self.document} of '{self.path}': "
                    f"unknown field{owner} (known fields: {known}), got {describe(value)}"
                )

    def bool_(self, field: str, default: object = MISSING) -> bool:
        """Return a boolean field."""
        value = self.raw(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, "bool", value)
        return value

    def int_tuple(
        self, field: str, default: object = MISSING, *, minimum: int = 0
    ) -> tuple[int, ...]:
        """Return a list of integers (each ``>= minimum`` and below ``2**63``) as a tuple.

        Shapes and chunk shapes beyond ``int64`` cannot index anything; refusing them here
        keeps absurd metadata from overflowing later arithmetic.
        """
        value = self.raw(field, default)
        if not isinstance(value, (list, tuple)) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > _INT64_MAX
            for v in value
        ):
            raise self.fail(field, f"a list of ints >= {minimum} (below 2**63)", value)
        return tuple(value)

    def object_(self, field: str, default: object = MISSING) -> dict[str, Any]:
        """Return a nested JSON object."""
        value = self.raw(field, default)
        if not isinstance(value, dict):
            raise self.fail(field, "a JSON object", value)
        return value

    def list_(self, field: str, default: object = MISSING) -> list[Any]:
        """Return a JSON list."""
        value = self.raw(field, default)
        if not isinstance(value, (list, tuple)):
            raise self.fail(field, "a list", value)
        return list(value)

    def choice(self, field: str, choices: tuple[str, ...], default: object = MISSING) -> str:
        """Return a string field restricted to ``choices``."""
        value = self.raw(field, default)
        if value not in choices:
            raise self.fail(field, "one of " + ", ".join(repr(c) for c in choices), value)
        assert isinstance(value, str)
        return value
