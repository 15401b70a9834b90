"""Reporting durations measured somewhere else (inside an actor) through pytest-benchmark.

pytest-benchmark times a callable with its timer around the call. To report the time an
*actor* spent — without the round trip of the actor call, as the original measured
``_resolve_refs`` — the benchmark's timer is replaced by an :class:`InnerClock` that stands
still except when the target adds the duration it received from the actor. Statistics,
JSON and comparisons then work unchanged on the inner durations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["InnerClock", "pedantic_inner"]


class InnerClock:
    """A clock that advances only by :meth:`add`; usable as a pytest-benchmark timer."""

    def __init__(self) -> None:
        self._now = 0.0

    def __call__(self) -> float:
        return self._now

    def add(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` (≥ 0)."""
        if not seconds >= 0:
            raise ValueError(f"InnerClock.add: expected a duration >= 0, got {seconds!r}")
        self._now += float(seconds)


def pedantic_inner(
    benchmark: Any,
    target: Callable[..., tuple[float, Any]],
    *,
    setup: Callable | None = None,
    rounds: int,
    warmup_rounds: int = 1,
    where: str = "inside the actor",
) -> Any:
    """``benchmark.pedantic`` on durations that ``target`` measured itself.

    Args:
        benchmark: the pytest-benchmark fixture.
        target: callable returning ``(seconds, result)``; only ``seconds`` is recorded.
        setup: untimed setup, as for ``benchmark.pedantic``.
        rounds, warmup_rounds: as for ``benchmark.pedantic``.
        where: recorded as ``extra_info["timed"]``.

    Returns:
        The ``result`` of the last call.

    Raises:
        RuntimeError: the installed pytest-benchmark has no replaceable timer (its private
            ``_timer`` attribute, present in 4.x and 5.x).
    """
    if not hasattr(benchmark, "_timer"):
        raise RuntimeError(
            "pytest-benchmark has no `_timer` attribute to replace; pedantic_inner needs 4.x/5.x"
        )
    clock = InnerClock()

    def run(*args: Any, **kwargs: Any) -> Any:
        seconds, result = target(*args, **kwargs)
        clock.add(seconds)
        return result

    benchmark._timer = clock
    benchmark.extra_info["timed"] = where
    return benchmark.pedantic(run, setup=setup, rounds=rounds, warmup_rounds=warmup_rounds)
