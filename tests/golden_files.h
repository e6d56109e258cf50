// Golden files for CPU tests: writing safetensors files (the fixtures' format) and a one-case golden cut from
// a fixture's golden.safetensors, so a test can plant changes and run `run_golden` on a single case.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"
#include "model/safetensors.h"

namespace dsinfer {

// Writes `tensors` as a safetensors file (little-endian, the fixtures' layout).
inline void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header;
  header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", std::string(dtype_name(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  const std::string h = header.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.raw()), t.nbytes());
}

// Writes case `c` of the golden file `golden` (input_ids, logits, greedy) to `path` as its case 0.
inline void write_one_case_golden(const std::string& golden, int c, const std::string& path) {
  SafetensorsFile file(golden);
  std::map<std::string, Tensor> tensors;
  for (const std::string what : {"input_ids.", "logits.", "greedy."}) {
    Tensor src = file.get(what + std::to_string(c));
    Tensor t = Tensor::empty(src.dtype(), src.shape());
    std::memcpy(t.raw(), src.raw(), src.nbytes());
    tensors.emplace(what + "0", t);
  }
  write_safetensors(path, tensors, {{"cases", "1"}});
}

}  // namespace dsinfer
