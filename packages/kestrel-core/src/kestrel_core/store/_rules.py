"""The buffer values a store runs on, checked once, and the note for an oversized append."""

from __future__ import annotations

from typing import Any

from kestrel_core._errors import ConfigError, KestrelError
from kestrel_core.execute._boundary import check_count

__all__ = ["buffer_int", "buffer_rules", "oversized_note"]


def buffer_int(value: Any, name: str, minimum: int) -> int:
    """A ``buffer.<name>`` count ≥ ``minimum``.

    Raises:
        ConfigError: ``value`` is not an integer, or is below ``minimum`` (names ``buffer.<name>``).
    """
    try:
        out = check_count(value, name)
    except KestrelError as err:
        raise ConfigError(f"buffer.{name}: {err}") from err
    if out < minimum:
        raise ConfigError(f"buffer.{name} must be ≥ {minimum}, got {out}")
    return out


def buffer_rules(*, min_samples: Any, max_samples: Any, validation_samples: Any) -> dict[str, int]:
    """The arguments of :func:`kestrel_core.rotate`, checked.

    Raises:
        ConfigError: a value is not an integer ≥ 0 (``max_samples`` ≥ 1).
    """
    return {
        "min_samples": buffer_int(min_samples, "min_samples", 0),
        "max_samples": buffer_int(max_samples, "max_samples", 1),
        "validation_samples": buffer_int(validation_samples, "validation_samples", 0),
    }


def oversized_note(total: int, rules: dict[str, int]) -> str | None:
    """The warning text when one append brings more rows than the buffer keeps, else ``None``."""
    keep = rules["max_samples"] + rules["validation_samples"]
    if total <= keep:
        return None
    return (
        f"{total} samples appended but max_samples is {rules['max_samples']} "
        f"(validation_samples {rules['validation_samples']}): the oldest {total - keep} "
        "become TOMBSTONE at once"
    )
