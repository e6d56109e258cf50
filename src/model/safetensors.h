// Memory-mapped safetensors checkpoints: single files and sharded directories (model.safetensors.index.json).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dsinfer {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  size_t offset = 0;  // from the start of the data section
  size_t nbytes = 0;
};

// One .safetensors file, mapped read-only. Every header entry is validated at open time:
// a truncated or corrupt file is an Error naming the file (and tensor), never a crash.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // A tensor borrowing the mapped bytes (kept alive by the returned tensor).
  Tensor get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }

 private:
  std::string path_;
  std::shared_ptr<const void> mapping_;
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors.index.json (sharded), else model.safetensors,
// else every *.safetensors file in the directory.
class SafetensorsArchive {
 public:
  static SafetensorsArchive open_dir(const std::string& dir);
  static SafetensorsArchive open_file(const std::string& path);

  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  Tensor get(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace dsinfer
