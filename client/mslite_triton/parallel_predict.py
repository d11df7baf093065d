"""MindSpore Lite's multi-card / multi-core sample flow (Ascend, Python), on this library.

The master process starts one child process per device (an Ascend card or core, a GPU, or on CPU one
core); each child builds a `Model` bound to its device and answers the master over a pipe:
`BUILD_FINISH` (or `ERROR`) once built, then `REPLY` with the outputs of each `PREDICT`, until `EXIT`.
The master splits a batch along axis 0, one slice per device, and concatenates the replies in order,
so the result equals running the slices one after another.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from typing import Any

import numpy as np

# message ids, as in the sample
ERROR = 0
PREDICT = 1
REPLY = 2
BUILD_FINISH = 3
EXIT = 4

log = logging.getLogger(__name__)


class MSLitePredict:
    """One device's model: the sample's `MSLitePredict` (mslite_engine.py)."""

    def __init__(self, model_path: str, device_id: int, target: str = "cpu") -> None:
        """Build the model on `device_id`: an Ascend or GPU device id, or on CPU the core it is pinned to."""
        from .context import Context
        from .model import Model, ModelType

        context = Context()
        context.target = [target]
        if target == "ascend":
            context.ascend.device_id = device_id
        elif target == "gpu":
            context.gpu.device_id = device_id
        else:  # a CPU "device" is a core: one single-thread worker pinned to it
            context.cpu.thread_num = 1
            context.cpu.thread_affinity_core_list = [device_id % len(os.sched_getaffinity(0))]
        self.model = Model()
        self.model.build_from_file(model_path, ModelType.MINDIR, context)

    def run(self, input_data: list[np.ndarray]) -> list[np.ndarray]:
        """Set each input and predict; returns the outputs as numpy arrays."""
        inputs = self.model.get_inputs()
        for i, tensor in enumerate(inputs):
            tensor.set_data_from_numpy(input_data[i])
        return [out.get_data_to_numpy() for out in self.model.predict(inputs)]


def predict_process_func(pipe_child_end: Any, model_path: str, device_id: int, target: str) -> None:
    """A child process: build, report, then serve PREDICT messages until EXIT."""
    try:
        worker = MSLitePredict(model_path, device_id, target)
        pipe_child_end.send((BUILD_FINISH, ""))
    except Exception as e:  # the master must hear about any build failure, whatever its type
        log.exception("build on device %d failed", device_id)
        pipe_child_end.send((ERROR, str(e)))
        return
    while True:
        msg_type, msg = pipe_child_end.recv()
        if msg_type == EXIT:
            break
        if msg_type != PREDICT:
            pipe_child_end.send((ERROR, "Expect to receive EXIT or PREDICT message for child process!"))
            continue
        try:
            pipe_child_end.send((REPLY, worker.run(msg)))
        except Exception as e:  # reported to the master, which raises it there
            pipe_child_end.send((ERROR, str(e)))


class ParallelPredictUtils:
    """The master: one child process per device, batches split across them."""

    def __init__(self, model_path: str, device_num: int, target: str = "cpu") -> None:
        self.model_path = model_path
        self.device_num = device_num
        self.target = target
        # spawn, not fork: the children must not inherit this process's gRPC threads
        ctx = multiprocessing.get_context("spawn")
        self._ctx = ctx
        self.pipe_parent_end = []
        self.pipe_child_end = []
        self.process: list[Any] = []
        for _ in range(device_num):
            parent_end, child_end = ctx.Pipe()
            self.pipe_parent_end.append(parent_end)
            self.pipe_child_end.append(child_end)

    def build_model(self) -> None:
        """Start the children and wait until every one has built its model.

        Raises:
            RuntimeError: a child failed to build (its message included).
        """
        for device_id in range(self.device_num):
            process = self._ctx.Process(
                target=predict_process_func,
                args=(self.pipe_child_end[device_id], self.model_path, device_id, self.target),
            )
            process.start()
            self.process.append(process)
        for device_id in range(self.device_num):
            msg_type, msg = self.pipe_parent_end[device_id].recv()
            if msg_type == ERROR:
                self.finalize()
                raise RuntimeError(f"Failed to build model on device {device_id}: {msg}")

    def predict(self, inputs: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        """Send inputs[i] to device i, all at once; returns each device's outputs.

        Raises:
            RuntimeError: a child failed to predict.
        """
        for i in range(self.device_num):
            self.pipe_parent_end[i].send((PREDICT, inputs[i]))
        result = []
        for i in range(self.device_num):
            msg_type, msg = self.pipe_parent_end[i].recv()
            if msg_type == ERROR:
                raise RuntimeError(f"Failed to call predict, exception occur: {msg}")
            result.append(msg)
        return result

    def predict_batch(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        """Split each input along axis 0 into one slice per device, predict, and concatenate in order."""
        slices = [np.array_split(a, self.device_num, axis=0) for a in batch]
        replies = self.predict([[s[i] for s in slices] for i in range(self.device_num)])
        return [np.concatenate([r[k] for r in replies], axis=0) for k in range(len(replies[0]))]

    def finalize(self) -> None:
        """Tell every child to exit and wait for it (safe to call twice)."""
        for i, process in enumerate(self.process):
            if process.is_alive():
                self.pipe_parent_end[i].send((EXIT, ""))
        for process in self.process:
            process.join(timeout=60)
        self.process = []
