// pytest-aoti's C++ loader runner: loads AOTInductor packages with
// torch::inductor::AOTIModelPackageLoader, as a C++ server does, and runs them on inputs
// read from a file, with no Python in the process.
//
// One request per line on stdin, fields separated by tabs; one answer per line on stdout:
//   set <threads> <flush denormals 0|1> <float32 matmul precision>
//       -> ok threads=<n> denormal=<0|1> precision=<text>
//   lib <path>          load a custom-op library (dlopen) -> ok
//   run <package> <inputs file> <outputs file> <num_runners> <fresh 0|1> <device>
//       -> ok load=<s> call=<s> loaded=<0|1> outputs=<n> inputs=<n>
// Any failure answers: error <stage> <message>. The inputs file holds a list of tensors
// (torch.save in Python); the outputs file gets a tuple of the outputs, then the inputs as
// they are after the call (torch::jit::pickle_save, read by torch.load).
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Failure : std::runtime_error {
  Failure(std::string stage, const std::string& message)
      : std::runtime_error(message), stage(std::move(stage)) {}
  std::string stage;
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream stream(line);
  while (std::getline(stream, field, '\t')) {
    fields.push_back(field);
  }
  return fields;
}

// One line: tabs and line ends of a message become spaces.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') {
      c = ' ';
    }
  }
  return text.size() > 2000 ? text.substr(0, 2000) : text;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<at::Tensor> read_inputs(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw Failure("inputs", "cannot open " + path);
  }
  std::vector<char> data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  c10::IValue value = torch::jit::pickle_load(data);
  if (!value.isList()) {
    throw Failure("inputs", "the inputs file does not hold a list");
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& item : value.toListRef()) {
    if (!item.isTensor()) {
      throw Failure("inputs", "the inputs file holds something other than tensors");
    }
    tensors.push_back(item.toTensor());
  }
  return tensors;
}

void write_tensors(const std::string& path, const std::vector<at::Tensor>& outputs,
                   const std::vector<at::Tensor>& inputs) {
  // a tuple: pickled as a plain one, which torch.load(weights_only=True) reads; an undefined
  // tensor (a None output) is None, as the Python engine returns it
  std::vector<c10::IValue> items;
  for (const std::vector<at::Tensor>* tensors : {&outputs, &inputs}) {
    for (const at::Tensor& tensor : *tensors) {
      items.push_back(tensor.defined() ? c10::IValue(tensor) : c10::IValue());
    }
  }
  std::vector<char> data = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(items)));
  std::ofstream file(path, std::ios::binary);
  file.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!file) {
    throw Failure("outputs", "cannot write " + path);
  }
}

class Runner {
 public:
  std::string set(const std::vector<std::string>& fields) {
    if (fields.size() != 4) {
      throw Failure("request", "set takes 3 fields");
    }
    at::set_num_threads(std::stoi(fields[1]));
    bool denormal = fields[2] == "1" && at::globalContext().setFlushDenormal(true);
    if (fields[2] != "1") {
      at::globalContext().setFlushDenormal(false);
    }
    at::globalContext().setFloat32MatmulPrecision(fields[3]);
    std::ostringstream answer;
    answer << "ok\tthreads=" << at::get_num_threads() << "\tdenormal=" << (denormal ? 1 : 0)
           << "\tprecision=" << fields[3];
    return answer.str();
  }

  std::string lib(const std::vector<std::string>& fields) {
    if (fields.size() != 2) {
      throw Failure("request", "lib takes 1 field");
    }
    if (dlopen(fields[1].c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = dlerror();
      throw Failure("lib", why ? why : "dlopen failed");
    }
    return "ok";
  }

  std::string run(const std::vector<std::string>& fields) {
    if (fields.size() != 7) {
      throw Failure("request", "run takes 6 fields");
    }
    const std::string& package = fields[1];
    size_t runners = static_cast<size_t>(std::stoul(fields[4]));
    bool fresh = fields[5] == "1";
    auto started = std::chrono::steady_clock::now();
    bool loaded = false;
    if (fresh || !loader_ || package != package_ || runners != runners_) {
      loader_.reset();  // the last package's engine goes before the next loads
      try {
        loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
            package, "model", false, runners);
      } catch (const std::exception& error) {
        package_.clear();
        throw Failure("load", error.what());
      }
      package_ = package;
      runners_ = runners;
      loaded = true;
    }
    double load_seconds = seconds_since(started);
    std::vector<at::Tensor> inputs = read_inputs(fields[2]);
    if (fields[6] != "cpu") {
      c10::Device device(fields[6]);
      for (at::Tensor& tensor : inputs) {
        tensor = tensor.to(device);
      }
    }
    started = std::chrono::steady_clock::now();
    std::vector<at::Tensor> outputs;
    try {
      outputs = loader_->run(inputs);
    } catch (const std::exception& error) {
      throw Failure("call", error.what());
    }
    double call_seconds = seconds_since(started);
    write_tensors(fields[3], outputs, inputs);
    std::ostringstream answer;
    answer << "ok\tload=" << load_seconds << "\tcall=" << call_seconds
           << "\tloaded=" << (loaded ? 1 : 0) << "\toutputs=" << outputs.size()
           << "\tinputs=" << inputs.size();
    return answer.str();
  }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  std::string package_;
  size_t runners_ = 0;
};

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  Runner runner;
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> fields = split(line);
    std::string answer;
    try {
      if (fields.empty()) {
        throw Failure("request", "an empty request");
      } else if (fields[0] == "set") {
        answer = runner.set(fields);
      } else if (fields[0] == "lib") {
        answer = runner.lib(fields);
      } else if (fields[0] == "run") {
        answer = runner.run(fields);
      } else {
        throw Failure("request", "unknown request " + fields[0]);
      }
    } catch (const Failure& failure) {
      answer = "error\t" + failure.stage + "\t" + one_line(failure.what());
    } catch (const std::exception& error) {
      answer = "error\tinternal\t" + one_line(error.what());
    }
    std::cout << answer << std::endl;
  }
  return 0;
}
