// Loads generated edge-code libraries (generated_code.h).
#include "ops/cc/generated_code.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

namespace ngra {

const GeneratedCode* LoadGeneratedCode(const std::string& path, const std::string& signature, std::string* why) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::unique_ptr<GeneratedCode>>;  // never freed: kept for the process
  std::lock_guard<std::mutex> lock(mu);
  auto found = loaded->find(path);
  if (found != loaded->end() && found->second) return found->second.get();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why = "cannot load " + path + ": " + (error ? error : "unknown error");
    return nullptr;
  }
  const auto* theirs = static_cast<const char*>(dlsym(handle, "ngra_edge_code_signature"));
  const auto* tables = static_cast<const char*>(dlsym(handle, "ngra_edge_code_tables"));
  auto code = std::make_unique<GeneratedCode>();
  code->forward = reinterpret_cast<GeneratedCode::Forward>(dlsym(handle, "ngra_edge_code_forward"));
  code->grad = reinterpret_cast<GeneratedCode::Grad>(dlsym(handle, "ngra_edge_code_grad"));
  if (theirs == nullptr || tables == nullptr || code->forward == nullptr || code->grad == nullptr) {
    *why = path + " is not a generated edge-code library (its symbols are missing)";
    dlclose(handle);
    return nullptr;
  }
  if (signature != theirs) {
    *why = path + " was generated for another program or build (" + theirs + "), not " + signature;
    dlclose(handle);
    return nullptr;
  }
  code->tables = tables;
  return ((*loaded)[path] = std::move(code)).get();
}

}  // namespace ngra
