"""Trace readers: polarity, gang counts, prices, multi-pool assembly, windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pricing.errors import PricingError
from pricing.traces import TraceFormatError, read_trace, read_traces
from tests.simulate.helpers import write_trace

AVAILABILITY = ("traces", "skypilot-spot-traces", "availability")


def test_single_node_files_read_one_as_unavailable(tmp_path):
    trace = read_trace(write_trace(tmp_path / "us-east-1a_v100_1.json", [0, 1, 1, 0], gap_seconds=195))
    assert trace.pool == "us-east-1a"
    assert trace.gap_seconds == 195
    assert trace.available.tolist() == [True, False, False, True]
    assert trace.prices is None and trace.gang is None


def test_count_files_need_the_whole_gang_unless_told(tmp_path):
    path = write_trace(tmp_path / "4-node" / "aws" / "us-east-1f_v100_1.json", [4, 3, 0, 4, 1], gap_seconds=300)
    assert read_trace(path).available.tolist() == [True, False, False, True, False]
    assert read_trace(path).gang == 4
    assert read_trace(path, gang=3).available.tolist() == [True, True, False, True, False]
    with pytest.raises(TraceFormatError, match="gang 5 is outside 1..4"):
        read_trace(path, gang=5)


def test_counts_above_one_make_a_count_file_without_a_folder_hint(tmp_path):
    trace = read_trace(write_trace(tmp_path / "z_x.json", [2, 1, 2]))
    assert trace.available.tolist() == [True, False, True] and trace.gang == 2


def test_gang_on_a_zero_one_file_is_refused(tmp_path):
    with pytest.raises(TraceFormatError, match="needs a multi-node count file"):
        read_trace(write_trace(tmp_path / "z.json", [0, 1]), gang=2)


def test_prices_are_read_per_tick_and_must_align(tmp_path):
    trace = read_trace(write_trace(tmp_path / "z.json", [0, 1], prices=[0.9, 1.1]))
    assert trace.prices.tolist() == [0.9, 1.1]
    with pytest.raises(TraceFormatError, match=r"'prices' has 1 entries but 'data' has 2"):
        read_trace(write_trace(tmp_path / "y.json", [0, 1], prices=[0.9]))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "not a readable JSON trace"),
        (json.dumps([0, 1]), "expected a JSON object"),
        (json.dumps({"data": [0]}), "metadata.gap_seconds"),
        (json.dumps({"metadata": {"gap_seconds": 0}, "data": [0]}), "metadata.gap_seconds"),
        (json.dumps({"metadata": {"gap_seconds": 60}, "data": []}), "'data' must be a non-empty list"),
        (json.dumps({"metadata": {"gap_seconds": 60}, "data": [0, "x"]}), r"'data\[1\]' must be a number"),
        (json.dumps({"metadata": {"gap_seconds": 60}, "data": [0, 0.5]}), "non-negative integers"),
        (json.dumps({"metadata": {"gap_seconds": 60}, "data": [0], "prices": [-1]}), "positive USD"),
    ],
)
def test_malformed_files_name_the_file_and_key(tmp_path, body, message):
    path = tmp_path / "bad.json"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(TraceFormatError, match=message) as info:
        read_trace(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, PricingError)


def test_missing_file_says_what_to_pass(tmp_path):
    with pytest.raises(TraceFormatError, match="no such trace file"):
        read_trace(tmp_path / "nope.json")


def test_a_folder_is_every_zone_in_it_padded_to_the_longest(tmp_path):
    write_trace(tmp_path / "zones" / "us-west-2a_v100_1.json", [0, 0, 1], prices=[1.0, 2.0, 3.0])
    write_trace(tmp_path / "zones" / "us-east-1a_v100_1.json", [1, 0])
    trace = read_traces([tmp_path / "zones"])
    assert trace.pools == ("us-east-1a", "us-west-2a")
    assert trace.available.tolist() == [[False, True, False], [True, True, False]]
    assert np.isnan(trace.spot_prices[0]).all()
    assert trace.spot_prices[1].tolist() == [1.0, 2.0, 3.0]
    assert trace.tick_hours == pytest.approx(195 / 3600)


def test_files_sharing_a_zone_are_named_by_stem(tmp_path):
    a = write_trace(tmp_path / "us-west-2a_k80_1.json", [0])
    b = write_trace(tmp_path / "us-west-2a_v100_1.json", [1])
    assert read_traces([a, b]).pools == ("us-west-2a_k80_1", "us-west-2a_v100_1")


def test_traces_on_different_grids_cannot_combine(tmp_path):
    a = write_trace(tmp_path / "a.json", [0], gap_seconds=195)
    b = write_trace(tmp_path / "b.json", [0], gap_seconds=600)
    with pytest.raises(TraceFormatError, match="different gap_seconds"):
        read_traces([a, b])


def test_empty_folder_and_repeated_file_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceFormatError, match="no \\*.json trace files"):
        read_traces([tmp_path / "empty"])
    a = write_trace(tmp_path / "a.json", [0])
    with pytest.raises(TraceFormatError, match="given twice"):
        read_traces([a, a])


def test_windows_pad_past_the_end_as_unavailable(tmp_path):
    trace = read_traces([write_trace(tmp_path / "z.json", [0, 1, 0], prices=[1.0, 2.0, 3.0])])
    window = trace.window(1, 4)
    assert window.available.tolist() == [[False, True, False, False]]
    assert window.spot_prices[0, :2].tolist() == [2.0, 3.0] and np.isnan(window.spot_prices[0, 2:]).all()
    with pytest.raises(ValueError, match="past the end of the trace"):
        trace.window(3, 1)


def test_select_reorders_pools_and_rejects_unknown(tmp_path):
    write_trace(tmp_path / "a_x.json", [0, 0])
    write_trace(tmp_path / "b_x.json", [1, 1])
    trace = read_traces([tmp_path])
    assert trace.select(["b", "a"]).available.tolist() == [[False, False], [True, True]]
    with pytest.raises(KeyError, match="unknown pool 'c'"):
        trace.select(["c"])


@pytest.mark.shared
def test_real_traces_match_the_published_availability(shared):
    """SOURCE.md: us-east-1a is spot-available 83.3 % of ticks, us-west-2b 9.5 %; the
    16-node us-east-2b gang is complete 45.6 % of ticks."""
    folder = shared(*AVAILABILITY, "1-node", "aws-02-15-2023")
    trace = read_traces([folder])
    assert len(trace.pools) == 9 and trace.ticks == 20158 and trace.gap_seconds == 195
    share = dict(zip(trace.pools, trace.available.mean(axis=1), strict=True))
    assert share["us-east-1a"] == pytest.approx(0.833, abs=0.001)
    assert share["us-west-2b"] == pytest.approx(0.095, abs=0.001)
    gang = read_trace(shared(*AVAILABILITY, "16-node", "aws-08-27-2023", "us-east-2b_v100_1.json"))
    assert gang.gang == 16 and gang.available.mean() == pytest.approx(0.456, abs=0.001)
