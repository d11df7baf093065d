// The C++ client's load for benchmarks/cpp_client.py: THREADS threads, each with its own input tensors,
// call ModelParallelRunner::Predict back to back on triton://MODEL for WARMUP_S, then SECONDS; prints one
// JSON line: img/s (batch 1: predicts answered within the SECONDS window), p50 and p99 latency in ms of
// those, errors, the first error's Status.
//
//   cpp_bench URL MODEL INPUT_BIN THREADS SECONDS WARMUP_S
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mslite_triton/api.h"

namespace ms = mslite_triton;
using Clock = std::chrono::steady_clock;

int main(int argc, char **argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: cpp_bench URL MODEL INPUT_BIN THREADS SECONDS WARMUP_S\n");
    return 2;
  }
  const std::string url = argv[1], model = argv[2];
  std::ifstream in(argv[3], std::ios::binary);
  const std::vector<char> input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int threads = std::atoi(argv[4]);
  const double seconds = std::atof(argv[5]), warmup_s = std::atof(argv[6]);

  auto context = std::make_shared<ms::Context>();
  context->SetServerUrl(url);
  context->MutableDeviceInfo().push_back(std::make_shared<ms::CPUDeviceInfo>());
  auto config = std::make_shared<ms::RunnerConfig>();
  config->SetContext(context);
  ms::ModelParallelRunner runner;
  ms::Status s = runner.Init("triton://" + model, config);
  if (s != ms::kSuccess) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 1;
  }
  auto after = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  const auto start = Clock::now() + after(warmup_s);
  const auto stop = start + after(seconds);
  std::mutex mutex;
  std::vector<double> latencies_ms;
  std::atomic<int> errors{0};
  std::string first_error;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      auto inputs = runner.GetInputs();
      if (inputs.size() != 1 || inputs[0].DataSize() != input.size()) {
        std::lock_guard<std::mutex> lock(mutex);
        first_error = "the input file does not fit the model's input";
        ++errors;
        return;
      }
      std::memcpy(inputs[0].MutableData(), input.data(), input.size());
      std::vector<double> mine;
      std::vector<ms::MSTensor> outputs;
      for (auto now = Clock::now(); now < stop; now = Clock::now()) {
        outputs.clear();
        ms::Status r = runner.Predict(inputs, &outputs);
        auto done = Clock::now();
        if (r != ms::kSuccess) {
          std::lock_guard<std::mutex> lock(mutex);
          if (first_error.empty()) first_error = r.ToString();
          ++errors;
        } else if (done >= start && done <= stop) {  // completions in the window: no edge bias
          mine.push_back(std::chrono::duration<double, std::milli>(done - now).count());
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto &t : pool) t.join();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) {
    if (latencies_ms.empty()) return 0.0;
    return latencies_ms[static_cast<size_t>(p * static_cast<double>(latencies_ms.size() - 1))];
  };
  for (char &c : first_error) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  std::printf(
      "{\"img_s\": %.2f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"requests\": %zu, \"errors\": %d, \"error\": \"%s\"}\n",
      static_cast<double>(latencies_ms.size()) / seconds, pct(0.5), pct(0.99), latencies_ms.size(), errors.load(),
      first_error.c_str());
  return errors.load() == 0 ? 0 : 1;
}
