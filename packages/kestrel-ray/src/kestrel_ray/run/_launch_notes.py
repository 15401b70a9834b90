"""What a launch on an existing run says or refuses before it starts.

* **epochs**: ``--epochs N`` (``N`` more than the saved weights have) together with a
  ``max_epochs`` override (a total) is refused, naming both.
"""

from __future__ import annotations

from collections.abc import Sequence

from kestrel_core import ConfigError

__all__ = ["check_epochs_overrides"]


def _override_key(item: str) -> str:
    return item.split("=", 1)[0].strip().lstrip("+~")


def check_epochs_overrides(overrides: Sequence[str], epochs: int | None) -> None:
    """Refuse ``--epochs`` together with a ``max_epochs`` override.

    Raises:
        ConfigError: naming both.
    """
    if epochs is None:
        return
    for item in overrides:
        key = _override_key(item)
        parts = key.split(".")
        if len(parts) == 4 and parts[0] == "graph" and parts[2:] == ["estimator", "max_epochs"]:
            raise ConfigError(
                f"--epochs {epochs} and the override {item} both set how long to train; give "
                f"one: --epochs N trains N epochs more than the saved weights have, "
                f"{key}=M sets the total over the run's launches (recorded in config.yml)"
            )
