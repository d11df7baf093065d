"""The catalog: what it takes to load each model of a local server again, kept while it runs.

For each ready model: the config it has (an override the admin loaded it with included), and for a model
uploaded through the load API a hard-linked copy of its files in the launcher's workspace (Triton's own
copy goes with the model or the server). A model from the server's repository needs no copy: Triton finds
it there again. A model whose name breaks the contract's rule (`model_names`: `..`, `/`...; a `--no-gateway`
server loads one unchecked) is never made a path of: it is not kept, and a heal does not load it again.
Nothing outside the uploads folder is ever removed. The supervisor refreshes the catalog whenever the live
workers change, and its heals load from it. Weights updated at run time live in stores the launcher owns
(`mslite_backend/weight_store.py`), which the new workers adopt.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mslite_contract.model_names import model_name_problem
from mslite_server.errors import TritonUnavailableError
from mslite_server.supervised_server import SupervisedServer
from mslite_server.workers import Worker, upload_copies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """What it takes to load one model again."""

    name: str
    config: dict[str, Any]
    files_dir: Path | None  # the launcher's copy of an uploaded model's files; None: from the repository


class ModelCatalog:
    """The models a heal loads again, by name (see the module docstring)."""

    def __init__(self, server: SupervisedServer) -> None:
        self.server = server
        self.known = False  # the catalog held every ready model at least once
        self._snapshots: dict[str, Snapshot] = {}
        self._files_root = server.workspace.path / "uploads"
        self._dirs: dict[str, str] = {}  # instance name -> model directory, learnt from live workers
        self.refused: set[str] = set()  # ready models whose names break the rule: never kept nor healed

    def snapshots(self) -> dict[str, Snapshot]:
        """Every model of the catalog, by name (a copy)."""
        return dict(self._snapshots)

    def instances(self) -> dict[str, set[str]]:
        """The instance names each model of the catalog has when all its workers live."""
        return {name: instance_names(snap.config) for name, snap in self._snapshots.items()}

    def note_workers(self, workers: Iterable[Worker]) -> None:
        """Learn which directory each live worker's model runs from (a snapshot of an upload copies it)."""
        for w in workers:
            if w.instance and w.state != "Z":
                self._dirs[w.instance] = w.model_dir

    def refresh(self, instances: set[str]) -> bool:
        """Snapshot every ready model; drop the ones gone.

        False when it could not be completed, or when some of the live worker `instances` belong to no
        ready model yet (a model still loading): the supervisor tries again at its next poll.
        """
        instances = set(instances)
        try:
            ready = set(self.server.loaded_models())
            complete = True
            for name in ready:
                if model_name_problem(name) is not None:
                    instances -= self._refuse(name)
                    continue
                config = self.server.http_json("GET", f"/v2/models/{name}/config", None)
                instances -= instance_names(config)
                known = self._snapshots.get(name)
                if known is not None and known.config == config:
                    continue
                snap = self._snapshot(name, config)
                if snap is None:
                    complete = False  # its workers are not known yet
                else:
                    self._snapshots[name] = snap
        except TritonUnavailableError:
            return False
        for name in set(self._snapshots) - ready:
            self._forget(name)
        self.refused &= ready
        if complete and not instances:
            self.known = True
            return True
        return False

    def _snapshot(self, name: str, config: dict[str, Any]) -> Snapshot | None:
        model_dir = next((self._dirs[i] for i in sorted(instance_names(config)) if i in self._dirs), None)
        if model_dir is None:
            return None
        if not upload_copies([model_dir]):  # from the server's repository: Triton finds it there again
            return Snapshot(name, config, None)
        target = self.upload_dir(name)
        shutil.rmtree(target, ignore_errors=True)
        try:
            _link_tree(Path(model_dir), target)
        except OSError as e:  # e.g. the model was unloaded meanwhile
            log.warning("could not keep the files of model '%s' for a heal: %s", name, e)
            shutil.rmtree(target, ignore_errors=True)
            return None
        return Snapshot(name, config, target)

    def _forget(self, name: str) -> None:
        snap = self._snapshots.pop(name)
        if snap.files_dir is not None:
            shutil.rmtree(self.upload_dir(snap.name), ignore_errors=True)

    def upload_dir(self, name: str) -> Path:
        """`<workspace>/uploads/<name>`, for a name that passed the rule: never anything outside that folder.

        Raises:
            ValueError: the path would not be a folder right inside the uploads folder.
        """
        target = self._files_root / name
        if model_name_problem(name) is not None or target.parent != self._files_root or target.name != name:
            raise ValueError(f"model name {name[:64]!r} is no folder name under the uploads folder")
        return target

    def _refuse(self, name: str) -> set[str]:
        """Note a ready model whose name breaks the rule; the instance names its workers have (if Triton says)."""
        if name not in self.refused:
            self.refused.add(name)
            log.warning(
                "model %.64r has a name this server does not keep files under (%s): a heal will not load it again",
                name,
                model_name_problem(name),
            )
        try:
            return instance_names(self.server.http_json("GET", f"/v2/models/{quote(name, safe='')}/config", None))
        except TritonUnavailableError:
            return set()

    def ready_models_of(self, instances: set[str]) -> list[str]:
        """The ready models the given instances serve (asked of the server: the catalog may lag).

        A dead process that served none was no worker, e.g. the short-lived stub that auto-completes a config.
        """
        found = []
        for name in self.server.loaded_models():
            config = self.server.http_json("GET", f"/v2/models/{quote(name, safe='')}/config", None)
            if instance_names(config) & instances:
                found.append(name)
        return found


def instance_names(config: dict[str, Any]) -> set[str]:
    """The instance names Triton gives a model's workers, from its config."""
    names: set[str] = set()
    for group in config.get("instance_group") or []:
        count = int(group.get("count", 1)) * max(1, len(group.get("gpus") or []))
        names.update(f"{group.get('name')}_{k}" for k in range(count))
    return names


def read_files(root: Path) -> dict[str, bytes]:
    """Every file under a kept model folder, by path relative to it."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _link_tree(source: Path, target: Path) -> None:
    """Hard links of every file under `source` (copies across file systems); config.pbtxt left out."""
    for path in source.rglob("*"):
        if not path.is_file() or path.name == "config.pbtxt":
            continue
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)
