// Loads generated edge-code libraries (generated_code.h).
#include "ops/cc/generated_code.h"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ngra {
namespace {

// Whether the file's ELF headers and loadable segments lie within it. dlopen maps the segments, and one that
// runs past the end of a file cut short kills the process (SIGBUS) where loading should fail.
bool WholeElf(const std::string& path, std::string* why) {
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const uint64_t size = data.size();
  Elf64_Ehdr header;
  if (size < sizeof(header) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0 ||
      data[EI_CLASS] != ELFCLASS64) {
    *why = path + " is not a 64-bit ELF library";
    return false;
  }
  std::memcpy(&header, data.data(), sizeof(header));
  const uint64_t programs_end = header.e_phoff + uint64_t{header.e_phnum} * header.e_phentsize;
  const uint64_t sections_end = header.e_shoff + uint64_t{header.e_shnum} * header.e_shentsize;
  bool whole = header.e_phentsize >= sizeof(Elf64_Phdr) && programs_end <= size && sections_end <= size;
  for (uint64_t at = header.e_phoff; whole && at < programs_end; at += header.e_phentsize) {
    Elf64_Phdr segment;
    std::memcpy(&segment, data.data() + at, sizeof(segment));
    whole = segment.p_type != PT_LOAD || segment.p_offset + segment.p_filesz <= size;
  }
  if (!whole) *why = path + " is cut short (" + std::to_string(size) + " bytes): its segments run past its end";
  return whole;
}

}  // namespace

const GeneratedCode* LoadGeneratedCode(const std::string& path, const std::string& signature, std::string* why) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::unique_ptr<GeneratedCode>>;  // never freed: kept for the process
  std::lock_guard<std::mutex> lock(mu);
  auto found = loaded->find(path);
  if (found != loaded->end() && found->second) {
    if (found->second->signature == signature) return found->second.get();
    *why = path + " was generated for another program or build (" + found->second->signature + "), not " + signature;
    return nullptr;
  }
  if (!WholeElf(path, why)) return nullptr;
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
  code->signature = theirs;
  return ((*loaded)[path] = std::move(code)).get();
}

}  // namespace ngra

// For ngra_tf/ops/generated.py (through ctypes): what LoadGeneratedCode finds wrong with the library, as the
// kernels would load it, in `why` (at most why_size bytes, terminated); 0 when nothing.
extern "C" __attribute__((visibility("default"))) int ngra_generated_code_problem(const char* path,
                                                                                 const char* signature, char* why,
                                                                                 size_t why_size) {
  std::string problem;
  if (ngra::LoadGeneratedCode(path, signature, &problem) != nullptr) return 0;
  if (why_size > 0) {
    const size_t n = std::min(problem.size(), why_size - 1);
    std::memcpy(why, problem.data(), n);
    why[n] = '\0';
  }
  return 1;
}
