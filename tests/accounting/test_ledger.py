"""The spend ledger: totals, idempotent replays, crash safety and file hygiene."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime.accounting.ledger import (
    FILENAME,
    IntervalKey,
    Ledger,
    LedgerConflictError,
    LedgerError,
    PoolSpend,
    spend_curve,
)

from .helpers import HOUR, ON_DEMAND, SPOT, T0, two_launch_ledger

REPO = Path(__file__).resolve().parents[2]


def test_totals_per_pool_launch_and_run(tmp_path):
    ledger = two_launch_ledger(tmp_path)
    assert ledger.total_usd() == pytest.approx(224.0 + 229.39)
    assert ledger.by_pool() == [
        PoolSpend(ON_DEMAND, "on_demand", pytest.approx(7.0), pytest.approx(229.39)),
        PoolSpend(SPOT, "spot", pytest.approx(20.0), pytest.approx(224.0)),
    ]
    assert ledger.by_launch() == {"launch-1": pytest.approx(224.0), "launch-2": pytest.approx(229.39)}
    # An open interval counts to its last heartbeat, or to `now` when asked.
    assert ledger.total_usd(now=T0 + 15 * HOUR) == pytest.approx(224.0 + 65.54 * 4.5)


def test_snapshot_has_burn_rate_curve_and_open_count(tmp_path):
    snap = two_launch_ledger(tmp_path).snapshot(now=T0 + 14 * HOUR)
    assert snap.open_intervals == 1
    assert snap.burn_usd_per_hour == pytest.approx(65.54)
    assert snap.curve == (
        (T0, 0.0),
        (T0 + 10 * HOUR, pytest.approx(224.0)),
        (T0 + 10.5 * HOUR, pytest.approx(224.0)),
        (T0 + 14 * HOUR, pytest.approx(224.0 + 229.39)),
    )
    assert snap.alerts_sent == frozenset()


def test_spend_curve_of_overlapping_intervals(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.record(IntervalKey("a", "n1"), pool=SPOT, purchase="spot", hourly_usd=10.0, start=T0, end=T0 + 2 * HOUR,
                  reason="done")
    ledger.record(IntervalKey("a", "n2"), pool=SPOT, purchase="spot", hourly_usd=10.0, start=T0 + HOUR,
                  end=T0 + 3 * HOUR, reason="done")
    assert spend_curve(ledger.intervals()) == [(T0, 0.0), (T0 + HOUR, 10.0), (T0 + 2 * HOUR, 30.0),
                                                (T0 + 3 * HOUR, 40.0)]


def test_replaying_an_open_interval_does_not_move_its_start(tmp_path):
    ledger = Ledger(tmp_path)
    key = IntervalKey("launch-1", "i-1")
    first = ledger.open_interval(key, pool=SPOT, purchase="spot", hourly_usd=3.6, start=T0)
    ledger.extend(key, T0 + HOUR)
    again = ledger.open_interval(key, pool=SPOT, purchase="spot", hourly_usd=3.6, start=T0)
    assert again.start == first.start and again.billed_until == T0 + HOUR
    assert ledger.total_usd() == pytest.approx(3.6)


def test_conflicting_replay_raises_and_changes_nothing(tmp_path):
    ledger = Ledger(tmp_path)
    key = IntervalKey("launch-1", "i-1")
    ledger.open_interval(key, pool=SPOT, purchase="spot", hourly_usd=3.6, start=T0)
    with pytest.raises(LedgerConflictError, match=r"hourly_usd 3.6 != 7.2.*next segment"):
        ledger.record(key, pool=SPOT, purchase="spot", hourly_usd=7.2, start=T0, end=T0 + HOUR, reason="x")
    stored = ledger.get(key)
    assert stored.is_open and stored.hourly_usd == 3.6 and stored.billed_until == T0


def test_extend_never_moves_back_and_close_is_final(tmp_path):
    ledger = Ledger(tmp_path)
    key = IntervalKey("launch-1", "i-1")
    ledger.open_interval(key, pool=SPOT, purchase="spot", hourly_usd=3.6, start=T0)
    ledger.extend(key, T0 + 2 * HOUR)
    assert ledger.extend(key, T0 + HOUR).billed_until == T0 + 2 * HOUR
    # A close earlier than the last heartbeat cannot shorten what was observed billed.
    closed = ledger.close(key, end=T0 + 1.5 * HOUR, reason="preempted")
    assert closed.end == T0 + 2 * HOUR and closed.close_reason == "preempted"
    assert ledger.close(key, end=T0 + 5 * HOUR, reason="replayed") == closed
    assert ledger.extend(key, T0 + 9 * HOUR) == closed
    assert ledger.record(key, pool=SPOT, purchase="spot", hourly_usd=3.6, start=T0, end=T0 + 7 * HOUR,
                         reason="replayed") == closed
    assert ledger.total_usd() == pytest.approx(7.2)


def test_record_closes_an_interval_left_open(tmp_path):
    ledger = Ledger(tmp_path)
    key = IntervalKey("launch-1", "*")
    ledger.open_interval(key, pool=SPOT, purchase="spot", hourly_usd=2.0, nodes=3, start=T0)
    done = ledger.record(key, pool=SPOT, purchase="spot", hourly_usd=2.0, nodes=3, start=T0, end=T0 + HOUR,
                         reason="completed")
    assert not done.is_open and ledger.total_usd() == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"purchase": "preemptible"}, r"purchase='preemptible' is not one of spot, on_demand"),
        ({"hourly_usd": -1.0}, r"hourly_usd=-1.0 must be a finite price >= 0"),
        ({"hourly_usd": float("nan")}, r"hourly_usd=nan"),
        ({"nodes": 0}, r"nodes=0 must be an integer >= 1"),
        ({"pool": ""}, r"pool must be a non-empty string"),
        ({"start": float("inf")}, r"start=inf is not a finite POSIX timestamp"),
    ],
)
def test_invalid_intervals_are_refused_with_the_field_named(tmp_path, kwargs, message):
    args = {"pool": SPOT, "purchase": "spot", "hourly_usd": 1.0, "start": T0, "nodes": 1} | kwargs
    with pytest.raises(LedgerError, match=message):
        Ledger(tmp_path).open_interval(IntervalKey("l", "n"), **args)


def test_unknown_interval_and_backwards_record_are_errors(tmp_path):
    ledger = Ledger(tmp_path)
    with pytest.raises(LedgerError, match="not in the ledger; call open_interval"):
        ledger.extend(IntervalKey("nope", "n"), T0)
    with pytest.raises(LedgerError, match="end .* is before start"):
        ledger.record(IntervalKey("l", "n"), pool=SPOT, purchase="spot", hourly_usd=1.0, start=T0, end=T0 - 1,
                      reason="x")
    assert ledger.intervals() == []


def test_alert_keys_are_remembered_across_reopen(tmp_path):
    with Ledger(tmp_path) as ledger:
        ledger.mark_alerts_sent(["actual-0.5", "actual-0.8"], kind="actual", at=T0)
        ledger.mark_alerts_sent(["actual-0.8"], kind="actual", at=T0 + 1)
    with Ledger(tmp_path) as reopened:
        assert reopened.sent_alerts() == {"actual-0.5", "actual-0.8"}
        assert reopened.snapshot().alerts_sent == {"actual-0.5", "actual-0.8"}


def test_file_mode_journal_and_sync(tmp_path):
    run_dir = tmp_path / "runs" / "one"
    old = os.umask(0)
    try:
        ledger = Ledger(run_dir)
    finally:
        os.umask(old)
    assert stat.S_IMODE((run_dir / FILENAME).stat().st_mode) == 0o600
    assert ledger._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert ledger._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: fsync at every commit


def test_a_second_reader_sees_only_committed_state(tmp_path):
    writer = two_launch_ledger(tmp_path)
    reader = Ledger(tmp_path)
    assert reader.total_usd() == pytest.approx(writer.total_usd())
    writer.extend(IntervalKey("launch-2", "*"), T0 + 15 * HOUR)
    assert reader.total_usd() == pytest.approx(224.0 + 65.54 * 4.5)


def test_corrupt_or_newer_ledgers_are_refused(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / FILENAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="not a readable spend ledger.*move it away"):
        Ledger(tmp_path / "bad")
    Ledger(tmp_path / "new").disconnect()
    db = sqlite3.connect(tmp_path / "new" / FILENAME)
    db.execute("PRAGMA user_version=99")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="version 99 was written by a newer danlu"):
        Ledger(tmp_path / "new")


_CRASHING_CONTROLLER = textwrap.dedent("""
    import os, signal, sys
    from runtime.accounting.ledger import IntervalKey, Ledger
    T0, HOUR = {t0!r}, 3600.0
    ledger = Ledger(sys.argv[1])
    ledger.record(IntervalKey("launch-1", "i-1"), pool="spot-pool", purchase="spot", hourly_usd=4.0,
                  start=T0, end=T0 + 2 * HOUR, reason="preempted")
    key = IntervalKey("launch-2", "i-2")
    ledger.open_interval(key, pool="od-pool", purchase="on_demand", hourly_usd=10.0, start=T0 + 2 * HOUR)
    ledger.extend(key, T0 + 3 * HOUR)
    ledger.mark_alerts_sent(["actual-0.5"], kind="actual", at=T0 + 3 * HOUR)
    print("recorded", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_sigkilled_controller_replays_without_double_counting(tmp_path):
    code = _CRASHING_CONTROLLER.format(t0=T0)
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "recorded"

    # The resumed controller replays everything it knows, then carries on.
    ledger = Ledger(tmp_path)
    assert ledger.total_usd() == pytest.approx(8.0 + 10.0)
    ledger.record(IntervalKey("launch-1", "i-1"), pool="spot-pool", purchase="spot", hourly_usd=4.0,
                  start=T0, end=T0 + 2 * HOUR, reason="preempted")
    key = IntervalKey("launch-2", "i-2")
    ledger.open_interval(key, pool="od-pool", purchase="on_demand", hourly_usd=10.0, start=T0 + 2 * HOUR)
    assert [iv.key for iv in ledger.open_intervals()] == [key]
    ledger.close(key, end=T0 + 4 * HOUR, reason="completed")
    assert ledger.total_usd() == pytest.approx(8.0 + 20.0)
    assert len(ledger.intervals()) == 2
    assert ledger.sent_alerts() == {"actual-0.5"}


# -- held capacity and reserved terms ----------------------------------------------------------

HELD = "aws:us-east-1:p4d.24xlarge"
TERM = "aws:us-west-2:p4d.24xlarge"


def test_held_capacity_is_billed_at_zero_and_its_hours_are_kept(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.record(IntervalKey("launch-1", "*"), pool=HELD, purchase="reserved_held", hourly_usd=0.0, nodes=2,
                  start=T0, end=T0 + 3 * HOUR, reason="launch ended")
    assert ledger.total_usd() == 0.0
    assert ledger.by_pool() == [PoolSpend(HELD, "reserved_held", pytest.approx(6.0), 0.0, 0.0)]


def test_a_term_is_charged_once_in_full_and_counts_everywhere(tmp_path):
    ledger = Ledger(tmp_path)
    bought = ledger.buy_term(TERM, "reserved_1y", term_usd=1000.0, nodes=2, launch_id="launch-1", at=T0)
    assert bought is not None and (bought.usd, bought.nodes) == (2000.0, 2)
    ledger.record(IntervalKey("launch-1", "*"), pool=TERM, purchase="reserved_1y", hourly_usd=0.0, nodes=2,
                  start=T0, end=T0 + 2 * HOUR, reason="preempted")
    # A replay of the same launch (a resumed controller) and a later launch on no more nodes pay nothing.
    assert ledger.buy_term(TERM, "reserved_1y", term_usd=1000.0, nodes=2, launch_id="launch-1", at=T0 + 5) == bought
    assert ledger.buy_term(TERM, "reserved_1y", term_usd=1000.0, nodes=1, launch_id="launch-2", at=T0 + HOUR) is None
    # A launch on three nodes buys the third one only.
    third = ledger.buy_term(TERM, "reserved_1y", term_usd=1000.0, nodes=3, launch_id="launch-3", at=T0 + 3 * HOUR)
    assert third is not None and (third.usd, third.nodes) == (1000.0, 1)
    assert [c.key for c in ledger.charges()] == [bought.key, third.key]
    assert (ledger.term_nodes(TERM, "reserved_1y"), ledger.term_nodes(TERM, "reserved_3y")) == (3, 0)

    assert ledger.total_usd() == pytest.approx(3000.0)
    assert ledger.by_pool() == [PoolSpend(TERM, "reserved_1y", pytest.approx(4.0), 3000.0, 3000.0)]
    assert ledger.by_launch() == {"launch-1": 2000.0, "launch-3": 1000.0}
    snap = ledger.snapshot(now=T0 + 4 * HOUR)
    assert (snap.total_usd, snap.charged_usd, snap.burn_usd_per_hour) == (3000.0, 3000.0, 0.0)
    assert snap.curve == ((T0, 2000.0), (T0 + 2 * HOUR, 2000.0), (T0 + 3 * HOUR, 3000.0))


def test_charges_are_idempotent_by_key_and_refuse_other_figures(tmp_path):
    ledger = Ledger(tmp_path)
    first = ledger.charge("setup", pool=TERM, purchase="on_demand", usd=12.5, at=T0, reason="image build")
    assert ledger.charge("setup", pool=TERM, purchase="on_demand", usd=12.5, at=T0, reason="image build") == first
    with pytest.raises(LedgerConflictError, match=r"charge 'setup' is already recorded .*usd 12.5 != 99.0"):
        ledger.charge("setup", pool=TERM, purchase="on_demand", usd=99.0, at=T0, reason="image build")
    with pytest.raises(LedgerError, match=r"usd=-1 must be a finite amount >= 0"):
        ledger.charge("bad", pool=TERM, purchase="on_demand", usd=-1, at=T0, reason="x")
    with pytest.raises(LedgerError, match=r"purchase='lease' is not one of spot, on_demand, .*reserved_held"):
        ledger.charge("bad", pool=TERM, purchase="lease", usd=1.0, at=T0, reason="x")
    assert ledger.total_usd() == 12.5


def test_a_version_1_ledger_gains_the_charges_table_and_keeps_its_intervals(tmp_path):
    db = sqlite3.connect(tmp_path / FILENAME)
    db.executescript("""
        CREATE TABLE intervals (launch_id TEXT NOT NULL, node TEXT NOT NULL, segment INTEGER NOT NULL,
            pool TEXT NOT NULL, purchase TEXT NOT NULL, hourly_usd REAL NOT NULL, nodes INTEGER NOT NULL,
            start REAL NOT NULL, billed_until REAL NOT NULL, "end" REAL, open_reason TEXT NOT NULL,
            close_reason TEXT, PRIMARY KEY (launch_id, node, segment));
        CREATE TABLE alerts_sent (key TEXT PRIMARY KEY, kind TEXT NOT NULL, sent_at REAL NOT NULL);
        PRAGMA user_version=1;
    """)
    db.execute("INSERT INTO intervals VALUES ('l-1','n0',0,?, 'spot', 2.0, 1, ?, ?, ?, 'launch', 'done')",
               (SPOT, T0, T0 + HOUR, T0 + HOUR))
    db.commit()
    db.close()
    ledger = Ledger(tmp_path)
    ledger.buy_term(TERM, "reserved_3y", term_usd=10.0, nodes=1, launch_id="l-2", at=T0 + HOUR)
    assert ledger.total_usd() == pytest.approx(12.0)
