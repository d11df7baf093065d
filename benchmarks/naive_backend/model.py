"""The naive baseline: the simplest hand-written python-backend model.py running one ONNX Runtime session.

Served as its own backend (`backend: "naive"`) by the benchmark only; not shipped. One `session.run` per
request, no merging of batched requests, no validation beyond what ORT does. The config declares the
tensors (no auto-complete) and may set `intra_op_thread_count` (default 1).
"""

import json

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        threads = int(config.get("parameters", {}).get("intra_op_thread_count", {}).get("string_value", "1"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        path = f"{args['model_repository']}/{args['model_version']}/model.onnx"
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            results = self.session.run(self.outputs, feeds)
            tensors = [pb_utils.Tensor(name, value) for name, value in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
