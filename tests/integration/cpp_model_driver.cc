// MindSpore Lite's single-model face of the C++ client (Model, ModelGroup, device infos, device data) and its
// server of its own, for tests/integration/test_cpp.py. Written against `mindspore::` names, as a ported
// program is, beside a `mindspore::example` namespace of its own (MindSpore Lite's runtime sample has one).
//
//   cpp_model_driver model URL FILE IN OUT INI  every Model call on FILE (ONNX) with IN as its input; the
//                                               results written to OUT/<case>.bin; INI is LoadConfig's file
//   cpp_model_driver fixed URL FILE IN OUT      a model with every dim fixed resized to batch 2 (Model::Resize, and
//                                               the runner's predict at batch 2), IN holding two samples;
//                                               the refusals (rank, a graph that cannot run, triton://)
//   cpp_model_driver group URL FILE             ModelGroup: weight sharing, workspace sharing, refusals
//   cpp_model_driver devices URL FILE           device infos (rank ids from the environment) and the
//                                               Ascend / AIR refusals
//   cpp_model_driver run FILE IN OUT            Build with no URL in the context (MSLITE_TRITON_URL's server,
//                                               else one of its own), one predict of IN, the output to OUT
//   cpp_model_driver hold FILE                  Build without a URL, print READY, wait for a line on stdin
//
// Statuses print as "<what> <code name> <ToString()>"; "model: NAME" names each uploaded model.
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "mslite_triton/context.h"
#include "mslite_triton/model.h"
#include "mslite_triton/model_group.h"
#include "mslite_triton/model_parallel_runner.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

namespace mindspore::example {
inline const char *Tag() { return "a program's own mindspore:: names compile beside the client's"; }
}  // namespace mindspore::example

namespace {

void Print(const std::string &what, const mindspore::Status &s) {
  std::cout << what << " " << mindspore::Status::CodeAsString(s.StatusCode()) << " " << s << std::endl;
}

std::string Read(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Write(const std::string &path, const void *data, size_t size) {
  std::ofstream(path, std::ios::binary).write(static_cast<const char *>(data), static_cast<std::streamsize>(size));
}

std::string Dims(const std::vector<int64_t> &shape) {
  std::string out;
  for (int64_t d : shape) out += (out.empty() ? "" : " ") + std::to_string(d);
  return out;
}

template <class Info>
std::shared_ptr<mindspore::Context> Context(const std::string &url, int threads = 0) {
  auto context = std::make_shared<mindspore::Context>();
  if (!url.empty()) context->SetServerUrl(url);
  context->SetThreadNum(threads);
  context->MutableDeviceInfo().push_back(std::make_shared<Info>());
  return context;
}

// Builds FILE as MindSpore Lite's quick start does (kMindIR for any file) and prints the model's name.
bool Build(mindspore::Model *model, const std::string &file, const std::shared_ptr<mindspore::Context> &context,
           const std::string &what = "build") {
  mindspore::Status s = model->Build(file, mindspore::kMindIR, context);
  Print(what, s);
  if (s.IsOk()) std::cout << "model: " << model->GetModelName() << std::endl;
  return s.IsOk();
}

// The model's first input filled from `input` (as many bytes as it holds).
void Fill(mindspore::MSTensor tensor, const std::string &input) {
  std::memcpy(tensor.MutableData(), input.data(), std::min(input.size(), tensor.DataSize()));
}

int Model(const std::string &url, const std::string &file, const std::string &in, const std::string &out,
          const std::string &ini) {
  const std::string input = Read(in);
  mindspore::Model model;
  Print("config_missing", model.LoadConfig(out + "/no_such.ini"));
  Print("config", model.LoadConfig(ini));  // [runner] thread_num=1
  Print("update", model.UpdateConfig("runner", {"thread_num", "2"}));  // wins over the file's
  if (!Build(&model, file, Context<mindspore::CPUDeviceInfo>(url))) return 1;
  Print("rebuild", model.Build(file, mindspore::kMindIR, Context<mindspore::CPUDeviceInfo>(url)));

  auto inputs = model.GetInputs();
  auto outputs = model.GetOutputs();
  std::cout << "input " << inputs[0].Name() << " " << Dims(inputs[0].Shape()) << std::endl;
  std::cout << "output " << outputs[0].Name() << " " << Dims(outputs[0].Shape()) << std::endl;
  std::cout << "by_name " << (model.GetInputByTensorName(inputs[0].Name()) == inputs[0]) << " "
            << (model.GetOutputByTensorName(outputs[0].Name()) == outputs[0]) << " "
            << (model.GetInputByTensorName("no_such") == nullptr) << " "
            << (model.GetOutputByTensorName("no_such") == nullptr) << " " << model.GetOutputTensorNames()[0]
            << std::endl;

  Fill(inputs[0], input);  // through a copy of the model's own tensor
  std::vector<mindspore::MSTensor> results;
  Print("predict", model.Predict(inputs, &results));
  std::cout << "own_outputs " << (results.size() == 1 && results[0] == model.GetOutputs()[0]) << std::endl;
  Write(out + "/plain.bin", results[0].Data().get(), results[0].DataSize());

  std::vector<float> buffer(outputs[0].ElementNum());  // the caller's own output buffer
  auto mine = model.GetOutputs();
  mine[0].SetData(buffer.data(), false);
  Print("predict_into", model.Predict(inputs, &mine));
  std::cout << "same_buffer " << (mine[0].Data().get() == buffer.data()) << std::endl;
  Write(out + "/inplace.bin", buffer.data(), buffer.size() * sizeof(float));
  mine[0].SetData(nullptr, false);  // the model's tensor lets go of the buffer before it goes

  Print("predict_noargs", model.Predict());
  Write(out + "/noargs.bin", model.GetOutputs()[0].Data().get(), model.GetOutputs()[0].DataSize());

  std::vector<int64_t> two = inputs[0].Shape();
  two[0] = 2;
  Print("resize", model.Resize(inputs, {two}));
  std::cout << "resized " << Dims(model.GetInputs()[0].Shape()) << " / " << Dims(model.GetOutputs()[0].Shape())
            << std::endl;
  Fill(inputs[0], input + input);
  results.clear();
  Print("predict_batch", model.Predict(inputs, &results));
  Write(out + "/batch.bin", results[0].Data().get(), results[0].DataSize());
  Print("resize_rank", model.Resize(inputs, {{2, 3, 224}}));
  std::cout << "after_refusal " << Dims(model.GetInputs()[0].Shape()) << std::endl;

  int device_memory = 0;  // never read: the client refuses device data
  auto held = model.GetInputs()[0];
  held.SetDeviceData(&device_memory);
  held.SetData(nullptr, false);
  std::cout << "device_data " << (held.GetDeviceData() == &device_memory) << std::endl;
  results.clear();
  Print("predict_device", model.Predict(model.GetInputs(), &results));
  held.SetDeviceData(nullptr);
  auto callback = [](const std::vector<mindspore::MSTensor> &, const std::vector<mindspore::MSTensor> &,
                     const mindspore::MSCallBackParam &) { return true; };
  Print("predict_callback", model.Predict(callback, nullptr));

  const std::string bytes = Read(file);
  mindspore::Model from_buffer;
  mindspore::Status s = from_buffer.Build(bytes.data(), bytes.size(), mindspore::kONNX,
                                          Context<mindspore::CPUDeviceInfo>(url));
  Print("build_buffer", s);
  if (s.IsError()) return 1;
  std::cout << "model: " << from_buffer.GetModelName() << std::endl;
  Fill(from_buffer.GetInputs()[0], input);
  results.clear();
  Print("predict_buffer", from_buffer.Predict(from_buffer.GetInputs(), &results));
  Write(out + "/buffer.bin", results[0].Data().get(), results[0].DataSize());
  return 0;
}

int Fixed(const std::string &url, const std::string &file, const std::string &in, const std::string &out) {
  const std::string input = Read(in);  // two samples
  mindspore::Model model;
  if (!Build(&model, file, Context<mindspore::CPUDeviceInfo>(url, 1))) return 1;
  const std::string built = model.GetModelName();
  auto inputs = model.GetInputs();
  std::cout << "fixed_input " << Dims(inputs[0].Shape()) << std::endl;
  Print("fixed_resize", model.Resize(inputs, {{2, 224, 224, 3}}));
  std::cout << "model: " << model.GetModelName() << std::endl;
  std::cout << "fixed_resized " << Dims(model.GetInputs()[0].Shape()) << " / " << Dims(model.GetOutputs()[0].Shape())
            << std::endl;
  Fill(inputs[0], input);
  std::vector<mindspore::MSTensor> results;
  Print("fixed_predict", model.Predict(inputs, &results));
  if (!results.empty()) Write(out + "/fixed_model.bin", results[0].Data().get(), results[0].DataSize());
  Print("fixed_rank", model.Resize(inputs, {{2, 224, 224}}));
  Print("fixed_channels", model.Resize(inputs, {{2, 224, 224, 4}}));  // the Conv takes 3 channels
  std::cout << "fixed_after_refusal " << Dims(model.GetInputs()[0].Shape()) << std::endl;

  auto config = std::make_shared<mindspore::RunnerConfig>();
  config->SetContext(Context<mindspore::CPUDeviceInfo>(url, 1));
  config->SetWorkersNum(1);
  mindspore::ModelParallelRunner runner;  // no Resize in its API: MindSpore Lite's workers resize at predict
  Print("fixed_runner_init", runner.Init(file, config));
  auto batch = runner.GetInputs();
  batch[0].SetShape({2, 224, 224, 3});
  Fill(batch[0], input);
  results.clear();
  Print("fixed_runner_predict", runner.Predict(batch, &results));
  if (!results.empty()) Write(out + "/fixed_runner.bin", results[0].Data().get(), results[0].DataSize());

  mindspore::ModelGroup group(mindspore::ModelGroupFlag::kShareWeight);  // a member bound to another's model
  mindspore::Model first, second;
  Print("fixed_group", group.AddModel(std::vector<mindspore::Model>{first, second}));
  if (!Build(&first, file, Context<mindspore::CPUDeviceInfo>(url, 1), "fixed_first") ||
      !Build(&second, file, Context<mindspore::CPUDeviceInfo>(url, 2), "fixed_second")) {
    return 1;
  }
  auto second_inputs = second.GetInputs();
  Print("fixed_shared_resize", second.Resize(second_inputs, {{2, 224, 224, 3}}));
  Fill(second_inputs[0], input);
  results.clear();
  Print("fixed_shared_predict", second.Predict(second_inputs, &results));
  if (!results.empty()) Write(out + "/fixed_shared.bin", results[0].Data().get(), results[0].DataSize());

  mindspore::Model bound;  // a repository model keeps its config's shapes
  if (!Build(&bound, "triton://" + built, Context<mindspore::CPUDeviceInfo>(url), "fixed_bound")) return 1;
  auto fixed = bound.GetInputs();
  Print("fixed_bound_resize", bound.Resize(fixed, {{2, 224, 224, 3}}));
  return 0;
}

int Group(const std::string &url, const std::string &file) {
  mindspore::ModelGroup shared(mindspore::ModelGroupFlag::kShareWeight);
  mindspore::Model a, b;
  Print("add_models", shared.AddModel(std::vector<mindspore::Model>{a, b}));
  if (!Build(&a, file, Context<mindspore::CPUDeviceInfo>(url, 1), "build_a") ||
      !Build(&b, file, Context<mindspore::CPUDeviceInfo>(url, 2), "build_b")) {
    return 1;
  }
  std::cout << "weights_shared " << (a.GetModelName() == b.GetModelName()) << std::endl;
  Print("add_built", shared.AddModel(std::vector<mindspore::Model>{a}));
  mindspore::Model c, d;
  Print("add_models_again", shared.AddModel(std::vector<mindspore::Model>{c}));
  mindspore::ModelGroup other(mindspore::ModelGroupFlag::kShareWeight);
  Print("add_other_group", other.AddModel(std::vector<mindspore::Model>{c}));
  mindspore::ModelGroup workspace;  // kShareWorkspace: each model its own server model
  auto pinned = Context<mindspore::CPUDeviceInfo>(url, 1);
  pinned->SetThreadAffinity(std::vector<int>{0});  // sent as the other clients send it
  if (!Build(&c, file, Context<mindspore::CPUDeviceInfo>(url, 1), "build_c") || !Build(&d, file, pinned, "build_d")) {
    return 1;
  }
  std::cout << "workspace_shared " << (c.GetModelName() == d.GetModelName()) << std::endl;  // c shares a's
  std::cout << "pinned_model " << d.GetModelName() << std::endl;

  // MindSpore Lite's cloud runtime's flag rules: each kind of AddModel under each flag
  const std::pair<const char *, mindspore::ModelGroupFlag> flags[] = {
      {"weight", mindspore::ModelGroupFlag::kShareWeight},
      {"workspace", mindspore::ModelGroupFlag::kShareWorkspace},
      {"both", mindspore::ModelGroupFlag::kShareWeightAndWorkspace},
      {"unknown", mindspore::ModelGroupFlag::kUnknown},
  };
  for (const auto &flag : flags) {
    mindspore::ModelGroup group(flag.second);
    const std::string name = flag.first;
    Print("flag_" + name + "_paths", group.AddModel(std::vector<std::string>{file, file}));
    Print("flag_" + name + "_buffers",
          group.AddModel(std::vector<std::pair<const void *, size_t>>{{file.data(), file.size()}}));
    mindspore::Model fresh;
    Print("flag_" + name + "_models", group.AddModel(std::vector<mindspore::Model>{fresh}));
    Print("flag_" + name + "_workspace",
          group.CalMaxSizeOfWorkspace(mindspore::kMindIR, Context<mindspore::CPUDeviceInfo>(url)));
  }
  Print("add_no_paths", workspace.AddModel(std::vector<std::string>{}));
  Print("add_no_buffers", workspace.AddModel(std::vector<std::pair<const void *, size_t>>{}));
  Print("workspace_cpu", workspace.CalMaxSizeOfWorkspace(mindspore::kMindIR, Context<mindspore::CPUDeviceInfo>(url)));
  Print("workspace_ascend",
        workspace.CalMaxSizeOfWorkspace(mindspore::kMindIR, Context<mindspore::AscendDeviceInfo>(url)));
  auto ge = Context<mindspore::AscendDeviceInfo>(url);
  ge->MutableDeviceInfo().front()->SetProvider("ge");
  Print("workspace_ge", workspace.CalMaxSizeOfWorkspace(mindspore::kMindIR, ge));
  Print("workspace_null", workspace.CalMaxSizeOfWorkspace(mindspore::kMindIR, nullptr));
  return 0;
}

int Devices(const std::string &url, const std::string &file) {
  mindspore::GPUDeviceInfo gpu;
  std::cout << "gpu_rank " << gpu.GetRankID() << " " << gpu.GetGroupSize() << std::endl;
  auto ascend = std::make_shared<mindspore::AscendDeviceInfo>();
  ascend->SetRankID(5);
  ascend->SetDeviceID(1);
  ascend->SetProvider("ge");
  std::cout << "ascend_rank " << ascend->GetRankID() << " " << ascend->GetDeviceID() << " " << ascend->GetProvider()
            << std::endl;
  auto context = std::make_shared<mindspore::Context>();
  context->SetServerUrl(url);
  context->MutableDeviceInfo().push_back(ascend);
  mindspore::Model model;
  Print("build_ascend", model.Build(file, mindspore::kMindIR, context));
  auto missing = Context<mindspore::GPUDeviceInfo>(url);  // a device the server lacks, in every client's words
  missing->MutableDeviceInfo().front()->Cast<mindspore::GPUDeviceInfo>()->SetDeviceID(99);
  mindspore::Model on_gpu;
  Print("build_gpu", on_gpu.Build(file, mindspore::kMindIR, missing));
  Print("build_air", model.Build(file, mindspore::kAIR, Context<mindspore::CPUDeviceInfo>(url)));
  Print("build_unknown_type", model.Build(file, mindspore::kUnknownType, Context<mindspore::CPUDeviceInfo>(url)));
  Print("build_missing", model.Build(file + ".missing", mindspore::kMindIR, Context<mindspore::CPUDeviceInfo>(url)));
  std::cout << "inputs_before_build " << model.GetInputs().size() << std::endl;
  std::cout << mindspore::example::Tag() << std::endl;
  return 0;
}

int Run(const std::string &file, const std::string &in, const std::string &out) {
  mindspore::Model model;
  if (!Build(&model, file, Context<mindspore::CPUDeviceInfo>(""))) return 1;
  auto inputs = model.GetInputs();
  Fill(inputs[0], Read(in));
  std::vector<mindspore::MSTensor> results;
  Print("predict", model.Predict(inputs, &results));
  if (!results.empty()) Write(out, results[0].Data().get(), results[0].DataSize());
  return 0;
}

int Hold(const std::string &file) {
  mindspore::Model model;
  if (!Build(&model, file, Context<mindspore::CPUDeviceInfo>(""))) return 1;
  std::cout << "READY" << std::endl;
  std::string line;
  std::getline(std::cin, line);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "model" && argc == 7) return Model(argv[2], argv[3], argv[4], argv[5], argv[6]);
  if (mode == "fixed" && argc == 6) return Fixed(argv[2], argv[3], argv[4], argv[5]);
  if (mode == "group" && argc == 4) return Group(argv[2], argv[3]);
  if (mode == "devices" && argc == 4) return Devices(argv[2], argv[3]);
  if (mode == "run" && argc == 5) return Run(argv[2], argv[3], argv[4]);
  if (mode == "hold" && argc == 3) return Hold(argv[2]);
  std::cerr << "usage: cpp_model_driver model URL FILE IN OUT INI | fixed URL FILE IN OUT | group|devices URL FILE |"
               " run FILE IN OUT |"
               " hold FILE\n";
  return 2;
}
