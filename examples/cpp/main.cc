// MindSpore Lite's C++ concurrent-inference sample (quick_start_parallel_cpp), ported to mslite-triton:
// only the includes differ from a MindSpore Lite program (the headers offer the names in namespace
// mindspore). Context -> RunnerConfig (workers) -> ModelParallelRunner::Init -> 5 threads, each GetInputs
// and 2 Predicts -> delete the runner.
//
//   make cpp-example   # builds the library and this sample and runs it (the client starts its server)
//   examples/cpp/build/main MODEL [INPUT_BIN] [--workers N] [--threads N] [--tasks N] [--dump DIR]
//
// MODEL is a local .onnx / .mindir file (uploaded with the admin key `serve` wrote) or triton://NAME.
// The server comes from MSLITE_TRITON_URL (e.g. http://127.0.0.1:8000); without it, the client starts
// `mslite-triton serve` (found on PATH) for the run. Without INPUT_BIN the inputs are random, as in
// MindSpore Lite's sample; with it, every thread sends that file's float32 values, and --dump DIR writes
// each output to DIR/out_<thread>_<task>.bin. Exit status 0 when every predict succeeded.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mslite_triton/context.h"
#include "mslite_triton/model_parallel_runner.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

namespace {
constexpr int kNumPrintOfOutData = 5;
constexpr size_t kMaxMallocSize = static_cast<size_t>(2000) * 1024 * 1024;

struct Options {
  std::string model_path;
  std::string input_path;
  std::string dump_dir;
  int workers = 3;
  int threads = 5;
  int tasks = 2;
};

// Uniform values in [0.1, 1.0), the same on every run.
void FillRandom(float *values, size_t count) {
  std::mt19937 engine(0);
  std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
  for (size_t i = 0; i < count; ++i) values[i] = uniform(engine);
}

// As MindSpore Lite's sample: the caller allocates the input and hands it to the tensor (which frees it).
int SetInputData(std::vector<mindspore::MSTensor> *inputs, const std::vector<char> &file_data) {
  if (inputs->size() != 1) {
    std::cerr << "input size must be 1.\n";
    return -1;
  }
  size_t size = (*inputs)[0].DataSize();
  if (size == 0 || size > kMaxMallocSize) {
    std::cerr << "malloc size is wrong" << std::endl;
    return -1;
  }
  if (!file_data.empty() && file_data.size() != size) {
    std::cerr << "the input file holds " << file_data.size() << " bytes; the model's input needs " << size << "\n";
    return -1;
  }
  void *input_data = malloc(size);
  if (input_data == nullptr) {
    std::cerr << "malloc failed" << std::endl;
    return -1;
  }
  if (file_data.empty()) {
    FillRandom(static_cast<float *>(input_data), size / sizeof(float));
  } else {
    std::memcpy(input_data, file_data.data(), size);
  }
  (*inputs)[0].SetData(input_data);
  return 0;
}

bool ParseArgs(int argc, const char **argv, Options *o) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return false;
      std::string value = argv[++i];
      if (arg == "--workers") {
        o->workers = std::atoi(value.c_str());
      } else if (arg == "--threads") {
        o->threads = std::atoi(value.c_str());
      } else if (arg == "--tasks") {
        o->tasks = std::atoi(value.c_str());
      } else if (arg == "--dump") {
        o->dump_dir = value;
      } else {
        return false;
      }
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty() || positional.size() > 2 || o->threads < 1 || o->tasks < 1) return false;
  o->model_path = positional[0];
  if (positional.size() == 2) o->input_path = positional[1];
  return true;
}

// One simulated client: its own input tensors, `tasks` predicts in a row.
int RunClient(mindspore::ModelParallelRunner *model_runner, const Options &o, const std::vector<char> &file_data,
              int client, std::mutex *print) {
  auto inputs = model_runner->GetInputs();
  if (inputs.empty() || SetInputData(&inputs, file_data) != 0) return -1;
  for (int task = 0; task < o.tasks; ++task) {
    std::vector<mindspore::MSTensor> outputs;
    auto predict_ret = model_runner->Predict(inputs, &outputs);
    std::lock_guard<std::mutex> lock(*print);
    if (predict_ret != mindspore::kSuccess) {
      std::cerr << "Predict error " << predict_ret << std::endl;
      return -1;
    }
    std::cout << "parallel id: " << client << " | task index: " << task << std::endl;
    for (auto tensor : outputs) {
      std::cout << "tensor name is:" << tensor.Name() << " tensor size is:" << tensor.DataSize()
                << " tensor elements num is:" << tensor.ElementNum() << std::endl;
      auto out_data = reinterpret_cast<const float *>(tensor.Data().get());
      std::cout << "output data is:";
      for (int i = 0; i < tensor.ElementNum() && i < kNumPrintOfOutData; i++) std::cout << " " << out_data[i];
      std::cout << std::endl;
      if (!o.dump_dir.empty()) {
        std::string path = o.dump_dir + "/out_" + std::to_string(client) + "_" + std::to_string(task) + ".bin";
        std::ofstream(path, std::ios::binary)
            .write(static_cast<const char *>(tensor.Data().get()), static_cast<std::streamsize>(tensor.DataSize()));
      }
    }
  }
  return 0;
}

int QuickStart(int argc, const char **argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::cerr << "usage: " << argv[0] << " MODEL [INPUT_BIN] [--workers N] [--threads N] [--tasks N] [--dump DIR]\n";
    return -1;
  }
  std::vector<char> file_data;
  if (!o.input_path.empty()) {
    std::ifstream in(o.input_path, std::ios::binary);
    file_data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (file_data.empty()) {
      std::cerr << "cannot read the input file " << o.input_path << std::endl;
      return -1;
    }
  }

  // Create and init context, add CPU device info
  auto context = std::make_shared<mindspore::Context>();
  auto &device_list = context->MutableDeviceInfo();
  auto device_info = std::make_shared<mindspore::CPUDeviceInfo>();
  device_list.push_back(device_info);

  // Create model
  auto model_runner = new (std::nothrow) mindspore::ModelParallelRunner();
  if (model_runner == nullptr) {
    std::cerr << "New Model failed." << std::endl;
    return -1;
  }
  auto runner_config = std::make_shared<mindspore::RunnerConfig>();
  runner_config->SetContext(context);
  runner_config->SetWorkersNum(o.workers);
  // Build model
  auto build_ret = model_runner->Init(o.model_path, runner_config);
  if (build_ret != mindspore::kSuccess) {
    delete model_runner;
    std::cerr << "Build model error " << build_ret << std::endl;
    return -1;
  }
  std::cout << "model: " << model_runner->GetModelName() << std::endl;

  // Simulate o.threads clients, each sending o.tasks predicts at the same time as the others.
  std::mutex print;
  std::vector<int> results(static_cast<size_t>(o.threads), 0);
  std::vector<std::thread> model_thread_run;
  for (int i = 0; i < o.threads; ++i) {
    model_thread_run.emplace_back(
        [&, i] { results[static_cast<size_t>(i)] = RunClient(model_runner, o, file_data, i, &print); });
  }
  for (auto &th : model_thread_run) th.join();
  int failed = static_cast<int>(std::count(results.begin(), results.end(), -1));
  std::cout << "clients: " << o.threads << ", failed: " << failed << std::endl;

  // Delete model runner.
  delete model_runner;
  return failed == 0 ? 0 : -1;
}
}  // namespace

int main(int argc, const char **argv) { return QuickStart(argc, argv) == 0 ? 0 : 1; }
