"""Tests go through public seams: reads of our products' private attributes stay few (tests/support/private_reads)."""

from __future__ import annotations

from tests.support.private_reads import private_reads

# At most 10 (the layout's bar), and only ever lowered: test_parity waits for its predicts to hold their slots,
# which nothing public shows; the others read a unit's own clock, pool or options in unit tests.
BAR = 7


def test_tests_read_no_more_private_attributes_than_the_bar() -> None:
    found = private_reads()
    assert len(found) <= BAR, "\n".join(map(str, found))


def test_the_scan_finds_a_private_read_and_skips_self(tmp_path) -> None:
    (tmp_path / "test_x.py").write_text(
        "def test(runner):\n    return runner._pending, self._pending, runner._not_ours, runner.__dict__\n"
    )
    assert [(r.owner, r.name) for r in private_reads(tmp_path)] == [("runner", "_pending")]
