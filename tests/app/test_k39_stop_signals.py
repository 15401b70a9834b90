"""K39: a stop request always stops — the signal handling and the pieces of an initial
simulation, without Ray (the launches in every phase: ``tests/faults/test_k39_stop_in_every_phase.py``)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kestrel.controller._prior import AHEAD_ROWS, MAX_PIECES, piece_size
from kestrel.controller._stop import StopControl, interrupt_exit_status, signals_interrupt
from kestrel_core import BufferConfig


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.2)  # the handler runs at the next bytecode of the main thread


def test_k39_sigterm_stops_gracefully_then_a_second_signal_aborts_with_its_status():
    with StopControl() as stop:
        _signal_self(signal.SIGTERM)
        assert stop.requested and stop.signal == signal.SIGTERM
        assert "SIGTERM" in (stop.reason or "")
        assert not stop.waited_enough()  # the grace starts at the request
        assert stop.waited_enough(grace=0.0)
        with pytest.raises(KeyboardInterrupt):
            _signal_self(signal.SIGINT)  # the second signal aborts
    # the exit status follows the first signal, also after a second one
    assert interrupt_exit_status() == 128 + signal.SIGTERM


def test_k39_sigint_first_gives_130():
    with StopControl() as stop:
        _signal_self(signal.SIGINT)
        assert stop.requested and stop.status == "interrupted"
    assert interrupt_exit_status() == 130


def test_k39_sigterm_before_the_launch_interrupts_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), signals_interrupt():
        _signal_self(signal.SIGTERM)
    assert interrupt_exit_status() == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_k39_stop_grace_counts_from_the_request():
    stop = StopControl()
    assert not stop.waited_enough(grace=0.0)  # no stop requested: never
    stop.request("test")
    stop.grace = 3600.0
    assert stop.requested and not stop.waited_enough()
    stop.grace = 0.0
    assert stop.waited_enough()


@pytest.mark.parametrize(
    ("simulate_count", "total", "expected"),
    [
        (32, 320, 32),  # a round's size: rows reach the store a round at a time
        (16, 100_000, 1563),  # at most ~MAX_PIECES pieces
        (100_000, 320, AHEAD_ROWS),  # never more than is held in flight
        (0, 10, 1),
    ],
)
def test_k39_initial_simulation_pieces_depend_on_the_config_alone(simulate_count, total, expected):
    buffer = BufferConfig(
        min_samples=max(1, total - 10),
        max_samples=total,
        validation_samples=10,
        simulate_count=simulate_count,
    )
    size = piece_size(buffer, total)
    assert size == expected
    assert total / size <= MAX_PIECES + 1


@pytest.mark.parametrize(
    ("simulate_count", "total", "deterministic", "expected"),
    [
        (2048, 640, True, 2048),  # deterministic: as before, one piece (its rows and seeds kept)
        (2048, 640, False, 320),  # otherwise two pieces in flight: a call queued on each replica
        (32, 320, False, 32),  # already many pieces: unchanged
        (100_000, 10_000, False, AHEAD_ROWS),
        (64, 1, False, 1),
    ],
)
def test_an_initial_simulation_without_determinism_is_two_pieces_at_least(
    simulate_count, total, deterministic, expected
):
    """Issue 32 item 3: without determinism each replica has a second call queued behind the
    first of the initial simulation (the pieces are all submitted at once)."""
    buffer = BufferConfig(
        min_samples=max(1, total - 10),
        max_samples=max(total, 11),
        validation_samples=10,
        simulate_count=simulate_count,
    )
    assert piece_size(buffer, total, deterministic=deterministic) == expected
