"""The accounting modules' public names, and that they stay free of torch."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = {
    "runtime.accounting.ledger": {"Charge", "FILENAME", "Interval", "IntervalKey", "Ledger", "LedgerConflictError", "LedgerError",
                       "LedgerSnapshot", "PoolSpend", "spend_curve"},
    "runtime.accounting.forecast": {"CapDecision", "Forecast", "StopTimings", "cap_decision", "forecast"},
    "runtime.accounting.alerts": {"Alert", "AlertConfigError", "AlertKind", "AlertPolicy", "AlertSink", "AlertsConfig",
                       "DEFAULT_THRESHOLDS", "Event", "LatePlan", "NodesLeft", "Replanned", "RunEnded", "RunOutcome",
                       "dispatch"},
    "runtime.accounting.alert_email": {"body_lines", "chart_png", "render", "subject"},
    "runtime.accounting.mailer": {"Mailer", "OutboxEntry", "OutboxStatus", "SmtpTarget"},
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_all_lists_exactly_the_public_names(name):
    module = importlib.import_module(name)
    assert set(module.__all__) == MODULES[name]
    assert all(hasattr(module, attr) for attr in module.__all__)


def test_importing_the_accounting_modules_loads_neither_torch_nor_matplotlib():
    code = ("import sys; import runtime.accounting.ledger, runtime.accounting.forecast, runtime.accounting.alerts, runtime.accounting.alert_email, "
            "runtime.accounting.mailer; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
