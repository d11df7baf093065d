"""How `mslite-triton tune` reads Model Analyzer's variants and picks one (no Model Analyzer needed)."""

from __future__ import annotations

import pytest

from mslite_server.tune import TuneError, Variant, _choose, _settings

VARIANTS = [
    Variant("m_config_default", 1, None, 4, None, 500.0, 5.0),
    Variant("m_config_0", 1, 2, 4, 100, 100.0, 20.0),
    Variant("m_config_1", 2, 1, 4, 100, 180.0, 60.0),
]


def test_variant_config_gives_workers_threads_and_queue_delay():
    pbtxt = (
        'name: "m"\ninstance_group { count: 2 kind: KIND_CPU }\n'
        'parameters { key: "thread_num" value { string_value: "3" } }\n'
        "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    )
    assert _settings(pbtxt) == (2, 3, 500)
    assert _settings('name: "m"\n') == (1, None, None)


def test_highest_throughput_among_the_swept_variants():
    assert _choose(VARIANTS, None).config == "m_config_1"  # the config as given is reported, not chosen


def test_p99_budget():
    assert _choose(VARIANTS, 30.0).config == "m_config_0"
    with pytest.raises(TuneError, match="no variant kept p99 within 10.0 ms"):
        _choose(VARIANTS, 10.0)
