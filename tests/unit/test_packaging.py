"""What a plain (non-editable) install ships: every package folder of ours is listed in pyproject.toml.

An editable install finds sub-packages by path, so a folder missing from `packages` passes every test in a checkout
and is left out of a wheel (the container image installs one): its first import fails there.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, roots = set(setup["packages"]), setup["package-dir"]
    found = {
        ".".join([name, *init.parent.relative_to(ROOT / folder).parts])
        for name, folder in roots.items()
        for init in (ROOT / folder).rglob("__init__.py")
        # a folder mapped to a package of its own (backend/mslite/mslite_backend) counts under that name only
        if not any(
            other != folder and Path(other) != Path(folder) and init.is_relative_to(ROOT / other)
            for other in roots.values()
            if Path(other).is_relative_to(Path(folder))
        )
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed <= set(roots) | found
