"""The figure of a calibration report (``kestrel.check``), drawn from the core's report."""

import pytest

from kestrel_core.diagnostics._calibration import calibration_report
from tests.core.test_calibration import gaussian_case


def test_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from kestrel.check._figure import calibration_figure

    report = calibration_report(*gaussian_case(0.6, m=80, draws=50))
    path = calibration_figure(report, tmp_path / "checks" / "calibration.png")
    assert (tmp_path / "checks" / "calibration.png").stat().st_size > 10_000
    assert path.endswith("calibration.png")
