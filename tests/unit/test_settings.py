"""The one configuration surface: every variable defined, read and documented in `mslite_contract.settings`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mslite_contract import settings

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "MSLITE_TRITON_"
NAME = re.compile(PREFIX + r"[A-Z0-9_]+")


def _table_rows(doc: str) -> dict[str, list[str]]:
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `" + PREFIX):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_variable_constant_is_listed_once() -> None:
    constants = {v for k, v in vars(settings).items() if k.endswith("_ENV") and isinstance(v, str)}
    listed = [v.name for v in settings.VARIABLES]
    assert sorted(listed) == sorted(constants)
    assert all(name.startswith(PREFIX) for name in listed)


def test_the_docs_table_matches_the_module() -> None:
    rows = _table_rows((ROOT / "docs" / "configuration.md").read_text())
    assert set(rows) == {v.name for v in settings.VARIABLES}
    for v in settings.VARIABLES:
        default, read_by, _ = rows[v.name]
        assert default == (f"`{v.default}`" if v.default else "unset"), v.name
        assert read_by == v.read_by, v.name


def test_docs_name_no_unknown_variable() -> None:
    known = {v.name for v in settings.VARIABLES}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        unknown = set(NAME.findall(doc.read_text())) - known
        assert not unknown, f"{doc.name} names {sorted(unknown)}, which settings.py does not define"


# Every folder of Python that could read a variable: the client, the launcher and the gateway (server/), the
# contract's other modules, the backend, the benchmarks, examples and scripts, and the tests.
SCANNED = ("client", "server", "contract", "backend", "benchmarks", "examples", "scripts", "tests")


def _spellings(root: Path, own: set[Path]) -> list[str]:
    """The Python files under `root`'s `SCANNED` folders that spell a variable's name, but those in `own`."""
    return [
        str(path.relative_to(root))
        for folder in SCANNED
        for path in sorted((root / folder).rglob("*.py"))
        if path.resolve() not in own and ".venv" not in path.parts and PREFIX in path.read_text()
    ]


def test_no_other_module_spells_a_variable() -> None:
    # the tests too: a test that spells a name keeps passing after the name changes, testing nothing
    offenders = _spellings(ROOT, {Path(settings.__file__).resolve(), Path(__file__).resolve()})
    assert not offenders, f"import the names from mslite_contract.settings instead: {offenders}"


@pytest.mark.parametrize(
    "where", ["server/mslite_server/cli.py", "server/mslite_gateway/process.py", "contract/mslite_contract/x.py"]
)
def test_the_spelling_scan_sees_the_launcher_the_gateway_and_the_contract(tmp_path: Path, where: str) -> None:
    planted = tmp_path / where
    planted.parent.mkdir(parents=True)
    planted.write_text(f'import os\nTIMEOUT = os.environ.get("{PREFIX}TIMEOUT_S")\n')
    (tmp_path / "server").mkdir(exist_ok=True)
    (tmp_path / "server" / "clean.py").write_text("import os\n")
    assert _spellings(tmp_path, set()) == [where]


def test_readers_defaults_and_values() -> None:
    assert settings.timeout_s({}) == settings.DEFAULT_TIMEOUT_S == 120
    assert settings.retry_s({settings.RETRY_S_ENV: " 2.5 "}) == 2.5
    assert settings.autostart({}) and not settings.autostart({settings.AUTOSTART_ENV: "0"})
    assert settings.shm_allowed({}) and not settings.shm_allowed({settings.SHM_ENV: "0"})
    assert settings.server_url({settings.URL_ENV: ""}) is None
    assert settings.log_level({settings.LOG_ENV: "info"}) == "INFO"
    assert settings.admin_key({settings.ADMIN_KEY_ENV: ""}) is None
    assert settings.key_dir({settings.KEY_DIR_ENV: "/k"}) == Path("/k")
    assert settings.key_dir({}) == Path.home() / ".mslite-triton" / "keys"
    assert settings.cache_max_bytes({}) == settings.DEFAULT_CACHE_MAX_BYTES == 2 << 30
    assert settings.shared_cache_root({settings.WEIGHTS_CACHE_ENV: "/c"}) == "/c"


def test_a_bad_number_names_its_variable() -> None:
    with pytest.raises(ValueError, match=f"{settings.TIMEOUT_S_ENV} must be a number of seconds, not 'soon'"):
        settings.timeout_s({settings.TIMEOUT_S_ENV: "soon"})


def test_the_two_request_caps_keep_their_values() -> None:
    assert settings.GATEWAY_MAX_REQUEST_BYTES == 64 << 20
    assert settings.MODEL_MAX_REQUEST_BYTES == 256 << 20
