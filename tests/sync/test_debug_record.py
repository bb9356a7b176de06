"""The timeout record: encode/decode round trip, the message, incomplete and foreign buffers."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutkit.ptx import SourceLocation
from layoutkit.sync import (RECORD_BYTES, BarrierTimeoutError, DebugRecordError, DebugTable,
                            TimeoutRecord, decode, raise_if_timed_out)


def table_with(*sites) -> DebugTable:
    table = DebugTable("my_kernel")
    for barrier, line in sites:
        table.add_site(barrier, SourceLocation("my_kernel.py", line))
    return table


def test_the_documented_message():
    table = table_with(("empty", 40), ("full", 57))
    record = TimeoutRecord(1, table.barrier_index("full"), 2, 0, 1, (3, 0, 0), (128, 0, 0),
                           2_000_000)
    with pytest.raises(BarrierTimeoutError) as info:
        raise_if_timed_out(record.encode(), table)
    assert str(info.value) == ("mbarrier 'full' stage 2 waited for parity 0 for more than 2.0 s "
                               "at my_kernel.py:57 (block 3, thread 128)")
    assert info.value.record == record


def test_message_details():
    table = table_with(("full", 9))
    record = TimeoutRecord(5, 0, 0, 1, 0, (3, 1, 0), (7, 2, 1), 250)
    assert record.message(table) == (
        "mbarrier 'full' stage 0 waited for parity 1 for more than 0.25 ms at my_kernel.py:9 "
        "(block (3, 1, 0), thread (7, 2, 1)); 4 more thread(s) timed out too")
    assert TimeoutRecord(1, 0, 0, 1, 0, (0, 0, 0), (0, 0, 0), 1_500_000).message(table) \
        .count("for more than 1.5 s") == 1


def test_an_empty_buffer_means_no_timeout():
    assert decode(bytes(RECORD_BYTES)) is None
    raise_if_timed_out(bytes(RECORD_BYTES), DebugTable("k"))  # no exception


def test_a_claimed_but_unfinished_record_says_so():
    raw = bytearray(RECORD_BYTES)
    raw[0] = 2  # two threads claimed, the magic word never landed
    record = decode(raw)
    assert not record.complete and record.claims == 2
    assert "killed before its record was complete" in record.message(DebugTable("k"))


def test_foreign_or_short_buffers_are_refused():
    raw = bytearray(RECORD_BYTES)
    raw[4:8] = b"\x01\x02\x03\x04"
    with pytest.raises(DebugRecordError, match="record magic = '0x4030201': the magic word"):
        decode(raw)
    with pytest.raises(DebugRecordError, match="record length = 8: a timeout record is 64 bytes"):
        decode(bytes(8))
    with pytest.raises(DebugRecordError, match="wrong DebugTable"):
        TimeoutRecord(1, 3, 0, 0, 0, (0, 0, 0), (0, 0, 0), 1).message(table_with(("full", 1)))
    with pytest.raises(DebugRecordError, match="timeout record stage = -1: must be an integer"):
        TimeoutRecord(1, 0, -1, 0, 0, (0, 0, 0), (0, 0, 0), 1).encode()


u32 = st.integers(0, 2**32 - 1)


@settings(max_examples=100, deadline=None)
@given(claims=st.integers(1, 2**32 - 1), fields=st.tuples(u32, u32, u32, u32),
       block=st.tuples(u32, u32, u32), thread=st.tuples(u32, u32, u32), timeout=u32)
def test_encode_decode_round_trip(claims, fields, block, thread, timeout):
    record = TimeoutRecord(claims, *fields, block, thread, timeout)
    assert decode(record.encode()) == record
    words = [int.from_bytes(record.encode()[i:i + 4], "little") for i in range(0, 64, 4)]
    assert decode(words) == record


def test_table_indices_are_stable():
    table = DebugTable("k")
    assert table.add_site("full", None) == 0 and table.add_site("empty", None) == 1
    assert table.add_site("full", None) == 2
    assert table.barriers == ["full", "empty"] and table.barrier_index("empty") == 1
    with pytest.raises(DebugRecordError, match="barrier name = '': a barrier in a timeout record"):
        table.add_site("", None)
