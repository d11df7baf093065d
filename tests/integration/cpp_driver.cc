// The C++ client's cases that the sample (examples/cpp/main.cc) does not show, for tests/integration/test_cpp.py.
//
//   cpp_driver shape URL MODEL D0,D1,...  one predict with the first input reshaped (zeros): its Status
//   cpp_driver grown URL MODEL            data set, then the batch dim doubled without new data: refused
//   cpp_driver inplace URL MODEL          outputs allocated by the caller, as MindSpore Lite's sample does
//   cpp_driver batch URL MODEL IN OUT     the first input's batch dim set from IN's size (raw values), the
//                                         first output written to OUT; prints its shape
//   cpp_driver buffer URL FILE            Init from the file's bytes in memory (1 worker), one predict, then
//                                         one with a kernel callback (refused)
//   cpp_driver bound URL MODEL            [runner] max_pending_predicts=1: a second predict while the
//                                         first is held (the test stops the worker between READY and go)
//   cpp_driver tuned URL FILE INI T W [K] Init from FILE with INI as the config file; the context's thread
//                                         num T and the workers num W set in code where > 0, and [runner]
//                                         K=1 added where given; prints the uploaded model's name
//
// Statuses print as "<what> <code name> <ToString()>". No exception is expected from the library.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mslite_triton/api.h"

namespace ms = mslite_triton;

namespace {

void Print(const char *what, const ms::Status &s) {
  std::cout << what << " " << ms::Status::CodeAsString(s.StatusCode()) << " " << s << std::endl;
}

std::shared_ptr<ms::RunnerConfig> Config(const std::string &url) {
  auto context = std::make_shared<ms::Context>();
  context->SetServerUrl(url);
  context->MutableDeviceInfo().push_back(std::make_shared<ms::CPUDeviceInfo>());
  auto config = std::make_shared<ms::RunnerConfig>();
  config->SetContext(context);
  return config;
}

// The model's inputs with zeros of their (static) shapes.
std::vector<ms::MSTensor> Zeros(ms::ModelParallelRunner *runner) {
  auto inputs = runner->GetInputs();
  for (auto &t : inputs) std::memset(t.MutableData(), 0, t.DataSize());
  return inputs;
}

int Shape(const std::string &url, const std::string &model, const std::string &dims) {
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init("triton://" + model, Config(url));
  Print("init", s);
  if (s != ms::kSuccess) return 1;
  std::vector<int64_t> shape;
  std::stringstream in(dims);
  for (std::string d; std::getline(in, d, ',');) shape.push_back(std::stoll(d));
  auto inputs = runner.GetInputs();
  inputs[0].SetShape(shape);
  std::memset(inputs[0].MutableData(), 0, inputs[0].DataSize());
  std::vector<ms::MSTensor> outputs;
  Print("predict", runner.Predict(inputs, &outputs));
  return 0;
}

int Grown(const std::string &url, const std::string &model) {
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init("triton://" + model, Config(url));
  if (s != ms::kSuccess) return Print("init", s), 1;
  auto inputs = Zeros(&runner);
  std::vector<int64_t> shape = inputs[0].Shape();
  shape[0] *= 2;
  inputs[0].SetShape(shape);
  std::vector<ms::MSTensor> outputs;
  Print("predict", runner.Predict(inputs, &outputs));
  return 0;
}

int InPlace(const std::string &url, const std::string &model) {
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init("triton://" + model, Config(url));
  if (s != ms::kSuccess) return Print("init", s), 1;
  auto inputs = Zeros(&runner);
  auto outputs = runner.GetOutputs();
  std::vector<void *> buffers;
  for (auto &output : outputs) {  // MindSpore Lite's sample: one spare element, its own buffer
    std::vector<int64_t> shape = output.Shape();
    shape.back() += 1;
    output.SetShape(shape);
    void *data = std::malloc(output.DataSize());
    output.SetData(data);
    buffers.push_back(data);
  }
  Print("predict", runner.Predict(inputs, &outputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::cout << "output " << outputs[i].Name() << " same_buffer=" << (outputs[i].Data().get() == buffers[i])
              << " elements=" << outputs[i].ElementNum() << std::endl;
  }
  return 0;
}

int Batch(const std::string &url, const std::string &model, const std::string &in, const std::string &out) {
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init("triton://" + model, Config(url));
  if (s != ms::kSuccess) return Print("init", s), 1;
  std::ifstream file(in, std::ios::binary);
  std::vector<char> values((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto inputs = runner.GetInputs();
  size_t sample = inputs[0].DataSize();  // GetInputs shows a dynamic batch dim as 1
  std::vector<int64_t> shape = inputs[0].Shape();
  shape[0] = static_cast<int64_t>(values.size() / sample);
  inputs[0].SetShape(shape);
  std::memcpy(inputs[0].MutableData(), values.data(), inputs[0].DataSize());
  std::vector<ms::MSTensor> outputs;
  s = runner.Predict(inputs, &outputs);
  Print("predict", s);
  if (s != ms::kSuccess) return 1;
  std::cout << "shape";
  for (int64_t d : outputs[0].Shape()) std::cout << " " << d;
  std::cout << std::endl;
  std::ofstream(out, std::ios::binary)
      .write(static_cast<const char *>(outputs[0].Data().get()), static_cast<std::streamsize>(outputs[0].DataSize()));
  return 0;
}

int Buffer(const std::string &url, const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto config = Config(url);
  config->SetWorkersNum(1);
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init(bytes.data(), bytes.size(), config);
  Print("init", s);
  if (s != ms::kSuccess) return 1;
  std::cout << "model: " << runner.GetModelName() << std::endl;
  auto inputs = Zeros(&runner);
  std::vector<ms::MSTensor> outputs;
  Print("predict", runner.Predict(inputs, &outputs));
  outputs.clear();
  ms::MSKernelCallBack before = [](const std::vector<ms::MSTensor> &, const std::vector<ms::MSTensor> &,
                                   const ms::MSCallBackParam &) { return true; };
  Print("callback", runner.Predict(inputs, &outputs, before));
  return 0;
}

int Bound(const std::string &url, const std::string &model) {
  auto config = Config(url);
  config->SetConfigInfo("runner", {{"max_pending_predicts", "1"}});
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init("triton://" + model, config);
  if (s != ms::kSuccess) return Print("init", s), 1;
  auto inputs = Zeros(&runner);
  std::cout << "READY" << std::endl;  // the test stops the worker, then says go
  std::string go;
  std::getline(std::cin, go);
  ms::Status held;
  std::thread first([&] {
    std::vector<ms::MSTensor> outputs;
    held = runner.Predict(inputs, &outputs);
  });
  while (runner.GetPendingPredicts() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::cout << "HELD" << std::endl;
  std::vector<ms::MSTensor> outputs;
  Print("SECOND", runner.Predict(inputs, &outputs));
  first.join();
  Print("HELD_RESULT", held);
  outputs.clear();
  Print("AFTER", runner.Predict(inputs, &outputs));

  ms::ModelParallelRunner plain;  // no [runner] section: MindSpore Lite's 1000
  s = plain.Init("triton://" + model, Config(url));
  if (s != ms::kSuccess) return Print("init", s), 1;
  outputs.clear();
  Print("PLAIN", plain.Predict(inputs, &outputs));
  return 0;
}

int Tuned(const std::string &url, const std::string &file, const std::string &ini, int threads, int workers,
          const char *extra) {
  auto config = Config(url);
  config->SetConfigPath(ini);
  if (threads > 0) config->GetContext()->SetThreadNum(threads);
  if (workers > 0) config->SetWorkersNum(workers);
  if (extra != nullptr) config->SetConfigInfo("runner", {{extra, "1"}});
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init(file, config);
  Print("init", s);
  if (s == ms::kSuccess) std::cout << "model: " << runner.GetModelName() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "shape" && argc == 5) return Shape(argv[2], argv[3], argv[4]);
  if (mode == "inplace" && argc == 4) return InPlace(argv[2], argv[3]);
  if (mode == "grown" && argc == 4) return Grown(argv[2], argv[3]);
  if (mode == "bound" && argc == 4) return Bound(argv[2], argv[3]);
  if (mode == "buffer" && argc == 4) return Buffer(argv[2], argv[3]);
  if (mode == "batch" && argc == 6) return Batch(argv[2], argv[3], argv[4], argv[5]);
  if (mode == "tuned" && (argc == 7 || argc == 8)) {
    return Tuned(argv[2], argv[3], argv[4], std::atoi(argv[5]), std::atoi(argv[6]), argc == 8 ? argv[7] : nullptr);
  }
  std::cerr << "usage: cpp_driver shape|grown|inplace|bound|batch|buffer|tuned URL MODEL|FILE [D0,D1,... | IN OUT |"
               " INI T W [K]]\n";
  return 2;
}
