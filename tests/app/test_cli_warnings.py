"""Warnings in the ``kestrel`` command print as ``warning: <message>``, each message once."""

import subprocess
import sys
import warnings

from kestrel.cli._warnings import clean_warnings
from tests.app import test_reproducible


def test_a_warning_is_one_line_and_a_repeated_message_is_not_shown_again():
    seen = []

    @clean_warnings
    def main(argv=None):
        for text in ["the buffer is small", "the buffer is small", "another"]:
            seen.append(warnings.formatwarning(UserWarning(text), UserWarning, "/x/_c.py", 9, "f("))
        return 0

    assert main([]) == 0
    assert seen == ["warning: the buffer is small\n", "", "warning: another\n"]


def test_the_format_is_installed_only_while_the_command_runs_and_not_with_debug():
    before = warnings.formatwarning
    inside = []

    @clean_warnings
    def main(argv=None):
        inside.append(warnings.formatwarning)
        return 0

    main([])
    main(["--debug"])
    assert inside[0] is not before and inside[1] is before
    assert warnings.formatwarning is before
    import kestrel_core  # noqa: F401  (a library import installs nothing)

    assert warnings.formatwarning is before


def test_kestrel_simulate_prints_a_clean_warning_line(tmp_path):
    cfg = test_reproducible.own_rng_config(tmp_path, ("x", "y"))
    args = ["simulate", "-c", str(cfg), "-n", "3", "-o", str(tmp_path / "s.npz")]
    code = "import sys; from kestrel.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    message = test_reproducible.message("OwnRng")
    other = message.replace("'x'", "'y'")
    assert lines == [f"warning: {message}", f"warning: {other}"]
    assert "ReproducibilityWarning" not in done.stderr and ".py:" not in done.stderr
