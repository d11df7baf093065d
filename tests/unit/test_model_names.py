"""The one rule for model names that reach the file system, in the gateway (both protocols) and the launcher."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_contract.model_names import MAX_MODEL_NAME_BYTES, MODEL_NAME_RULE, check_model_name, model_name_problem
from mslite_gateway.model_control import check_http_name, grpc_load_message, grpc_unload_message
from mslite_gateway.rules import Refusal
from mslite_server.model_catalog import ModelCatalog

BAD = ["", ".", "..", ".hidden", "a/b", "/etc", "a\\b", "a\0b", "a..b", "x" * (MAX_MODEL_NAME_BYTES + 1), "\udcff"]
GOOD = ["tiny", "mobilenet_v2-1.0", "a.b", "模型", "x" * MAX_MODEL_NAME_BYTES]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused_naming_the_rule(name: str) -> None:
    assert model_name_problem(name) is not None
    with pytest.raises(ValueError, match="invalid model name") as refused:
        check_model_name(name)
    assert MODEL_NAME_RULE in str(refused.value)


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass(name: str) -> None:
    assert model_name_problem(name) is None
    check_model_name(name)


@pytest.mark.parametrize(
    "target",
    [b"/v2/repository/models/../load", b"/v2/repository/models/%2E%2E/unload", b"/v2/repository/models/a%2Fb/load",
     b"/v2/repository/models/.x/load?q=1", b"/v2/repository/models/a%00b/unload", b"/v2/repository/models//load"],
)  # fmt: skip
def test_http_loads_and_unloads_of_bad_names_are_refused_with_400(target: bytes) -> None:
    with pytest.raises(Refusal, match="invalid model name") as refused:
        check_http_name(target)
    assert refused.value.status == 400 and MODEL_NAME_RULE in refused.value.message


@pytest.mark.parametrize(
    "target", [b"/v2/repository/models/tiny/load", b"/v2/models/../infer", b"/v2/repository/index"]
)
def test_other_http_paths_and_good_names_pass(target: bytes) -> None:
    check_http_name(target)


@pytest.mark.parametrize("name", ["..", "a/b", ".x", "a\0b"])
def test_grpc_loads_and_unloads_of_bad_names_are_refused(name: str) -> None:
    load = pb.RepositoryModelLoadRequest(model_name=name).SerializeToString()
    unload = pb.RepositoryModelUnloadRequest(model_name=name).SerializeToString()
    for check, message in ((grpc_load_message, load), (grpc_unload_message, unload)):
        with pytest.raises(Refusal, match="invalid model name"):
            check(message)
    assert grpc_unload_message(pb.RepositoryModelUnloadRequest(model_name="tiny").SerializeToString()) is None


def test_the_catalog_never_makes_a_path_outside_its_uploads_folder(tmp_path: Path) -> None:
    server = SimpleNamespace(workspace=SimpleNamespace(path=tmp_path))
    catalog = ModelCatalog(server)  # type: ignore[arg-type]
    assert catalog.upload_dir("tiny") == tmp_path / "uploads" / "tiny"
    for name in ("..", ".", "a/../..", "/etc", ""):
        with pytest.raises(ValueError, match="no folder name under the uploads folder"):
            catalog.upload_dir(name)
