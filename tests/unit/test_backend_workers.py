"""Which worker an instance is (instances Triton adds to a live model included), and its metric series."""

from __future__ import annotations

import pytest

from mslite_backend.affinity import config_with_instance, worker_index
from mslite_backend.config import BackendConfig
from mslite_backend.errors import ConfigError
from mslite_backend.metrics import series_of, worker_labels


def _config(*groups: dict) -> dict:
    return {"name": "m", "backend": "mslite", "instance_group": list(groups)}


def test_an_instance_of_the_config_keeps_it():
    config = _config({"name": "m_0", "count": 2}, {"name": "m_1", "count": 1})
    assert config_with_instance(config, "m_0_1") == (config, False)
    assert worker_index(config, "m_1_0") == 2


def test_an_added_instance_grows_its_group():
    config = _config({"name": "m_0", "count": 1, "kind": "KIND_CPU"})
    grown, added = config_with_instance(config, "m_0_2")  # the count went from 1 to 3
    assert added and grown["instance_group"] == [{"name": "m_0", "count": 3, "kind": "KIND_CPU"}]
    assert config["instance_group"][0]["count"] == 1  # the original is left alone
    assert worker_index(grown, "m_0_2") == 2
    assert BackendConfig.from_model_config(grown, cores=6).intra_op_threads == 2  # threads sized for 3 workers


def test_an_added_gpu_instance_grows_its_group_by_whole_counts():
    config = _config({"name": "m_0", "count": 1, "gpus": [0, 1]})
    grown, _ = config_with_instance(config, "m_0_3")  # count 2 on each of two GPUs
    assert grown["instance_group"][0]["count"] == 2


@pytest.mark.parametrize("name", ["other_0", "m_0_x", "m_0"])
def test_a_name_of_no_group_is_refused(name: str):
    with pytest.raises(ConfigError, match=f"instance '{name}' is not in the model's instance groups"):
        config_with_instance(_config({"name": "m_0", "count": 1}), name)


def test_every_series_of_a_worker_names_its_process():
    labels = worker_labels("m", "m_0_0", 123)
    assert series_of("exec_ms", "5", labels) == ("mslite_execution_ms_bucket", {**labels, "le": "5"})
    assert series_of("batch", "sum", labels) == ("mslite_batch_size_sum", labels)
    assert series_of("errors", "inference", labels)[1] == {"model": "m", "instance": "m_0_0", "pid": "123",
                                                          "kind": "inference"}  # fmt: skip
