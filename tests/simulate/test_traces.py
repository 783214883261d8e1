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
    with pytest.raises(TraceFormatError, match="needs a count file"):
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
    with pytest.raises(TraceFormatError, match="folder has no trace files"):
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


# -- the format is read from the content, and said -------------------------------------------


def test_a_zero_one_file_under_a_gang_folder_is_read_as_zero_one(tmp_path):
    """The bug of issue 17: a 0/1 file in a `4-node` folder was read as counts (never a
    full gang of 4, so spot never appeared)."""
    trace = read_trace(write_trace(tmp_path / "4-node" / "us-east-1f_v100_1.json", [0, 1, 0, 0], gap_seconds=600))
    assert trace.available.tolist() == [True, False, True, True]
    assert trace.gang is None and trace.format == "json 0/1 (1 = unavailable)"


def test_count_files_say_the_gang_they_were_read_with(tmp_path):
    trace = read_trace(write_trace(tmp_path / "16-node" / "z_v100_1.json", [16, 3, 12], gap_seconds=300))
    assert trace.format == "json instance counts (available = 16 of 16 up)"
    # a folder that names fewer nodes than the file holds is not believed
    small = read_trace(write_trace(tmp_path / "2-node" / "z_v100_1.json", [0, 3, 1]), gang=2)
    assert small.available.tolist() == [False, True, False]
    assert small.format == "json instance counts (available = 2 of 3 up)"


def test_zone_folders_of_full_json_with_their_price_info(tmp_path):
    """The SkyNomad layout: <zone>/full.json plus numbered window shards, prices in metadata."""
    root = tmp_path / "converted"
    for zone, data in (("us-east-1f_v100_1", [1, 0, 0]), ("us-west-2c_v100_1", [0, 0, 1])):
        body = {"metadata": {"gap_seconds": 600, "price_info": {"price": 1.26, "on_demand_price": 3.06}},
                "data": data}
        (root / zone).mkdir(parents=True)
        (root / zone / "full.json").write_text(json.dumps(body), encoding="utf-8")
        (root / zone / "0.json").write_text(json.dumps(body | {"data": [1]}), encoding="utf-8")
    trace = read_traces([root])
    assert trace.pools == ("us-east-1f", "us-west-2c")
    assert trace.available.tolist() == [[False, True, True], [True, True, False]]
    assert trace.formats == ("full.json 0/1 (1 = unavailable)",) * 2
    assert trace.on_demand_price == 3.06 and np.all(trace.spot_prices == 1.26)
    # one zone's folder alone is its full.json, not its shards
    assert read_traces([root / "us-east-1f_v100_1"]).sources == (root / "us-east-1f_v100_1" / "full.json",)


def test_csv_date_availability_reads_one_as_available_on_its_own_grid(tmp_path):
    path = tmp_path / "us-east-1a_v100_1.csv"
    rows = ["2023-02-15 22:08:16,1", "2023-02-15 22:11:31,1", "2023-02-15 22:14:46,0",
            # one probe missing (22:18:01): it repeats the row before; clocks drift by a second
            "2023-02-15 22:21:17,1", "2023-02-15 22:24:32,0"]
    path.write_text("date,availability\n" + "\n".join(rows) + "\n", encoding="utf-8")
    trace = read_trace(path)
    assert trace.gap_seconds == 195 and trace.pool == "us-east-1a"
    assert trace.available.tolist() == [True, True, False, False, True, False]
    assert trace.format == "csv date,availability (1 = available)"
    assert read_traces([tmp_path]).formats == ("csv date,availability (1 = available)",)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("time,up\n1,0\n", "header is 'date,availability'"),
        ("date,availability\n2023-01-01 00:00:00,0\n", "at least two rows"),
        ("date,availability\n2023-01-01 00:00:00,0\nyesterday,1\n", "line 3: expected 'YYYY-MM-DD HH:MM:SS"),
        ("date,availability\n2023-01-01 00:00:00,0\n2023-01-01 00:05:00,2\n", "line 3: availability must be 0 or 1"),
        ("date,availability\n2023-01-01 00:05:00,0\n2023-01-01 00:00:00,1\n", "line 3: dates must increase"),
    ],
)
def test_malformed_csv_names_the_line(tmp_path, body, message):
    path = tmp_path / "z.csv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(TraceFormatError, match=message) as info:
        read_trace(path)
    assert str(path) in str(info.value)


def test_bad_price_info_names_the_key(tmp_path):
    path = tmp_path / "z.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 60, "price_info": {"on_demand_price": -3}},
                                "data": [0]}), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"'metadata.price_info.on_demand_price' must be a positive"):
        read_trace(path)
