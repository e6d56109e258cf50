// safetensors parsing: 8-byte little-endian header length, JSON header, raw tensor bytes; mmap-backed.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace dsinfer {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

std::shared_ptr<const void> map_file(const std::string& path, size_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot stat ", path, ": ", std::strerror(err));
  }
  *size = static_cast<size_t>(st.st_size);
  if (*size == 0) {
    ::close(fd);
    fail(path, ": file is empty (truncated safetensors file)");
  }
  void* p = ::mmap(nullptr, *size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail("cannot mmap ", path, ": ", std::strerror(err));
  size_t len = *size;
  return std::shared_ptr<const void>(p, [len](const void* q) { ::munmap(const_cast<void*>(q), len); });
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  mapping_ = map_file(path, &size_);
  const auto* bytes = static_cast<const uint8_t*>(mapping_.get());
  DSI_CHECK(size_ >= 8, path, ": truncated safetensors file (", size_, " bytes, no header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  DSI_CHECK(header_len <= kMaxHeaderBytes, path, ": corrupt safetensors header length ", header_len);
  DSI_CHECK(header_len <= size_ - 8, path, ": truncated safetensors file (header of ", header_len,
            " bytes but only ", size_ - 8, " bytes follow)");
  data_start_ = 8 + header_len;
  const size_t data_size = size_ - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + data_start_));
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": corrupt safetensors header (invalid JSON): ", e.what());
  }
  DSI_CHECK(header.is_object(), path, ": corrupt safetensors header (not a JSON object)");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (entry.is_object()) {
        for (auto m = entry.begin(); m != entry.end(); ++m) {
          metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
        }
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail(path, ": tensor \"", name, "\": ", what); };
    if (!entry.is_object()) bad("header entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) bad("missing dtype");
    TensorInfo info;
    info.name = name;
    std::string dtype = entry["dtype"].get<std::string>();
    if (!parse_dtype(dtype, &info.dtype)) bad("unsupported dtype " + dtype);
    if (!entry.contains("shape") || !entry["shape"].is_array()) bad("missing shape");
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) bad("invalid shape");
      uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > (uint64_t{1} << 48) / v) bad("shape too large");
      numel *= v;
      info.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : nlohmann::json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      bad("missing or invalid data_offsets");
    }
    uint64_t begin = offsets[0].get<uint64_t>();
    uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end) bad("data_offsets begin after end");
    if (end > data_size) {
      bad(str_cat("data [", begin, ", ", end, ") lies past the end of the file (", data_size,
                  " data bytes): truncated file"));
    }
    if (end - begin != numel * dtype_size(info.dtype)) {
      bad(str_cat("data_offsets span ", end - begin, " bytes but ", dtype, " ", shape_str(info.shape),
                  " needs ", numel * dtype_size(info.dtype)));
    }
    info.offset = begin;
    info.nbytes = end - begin;
    tensors_.emplace(name, std::move(info));
  }
  // Non-empty tensors must not overlap. Each is compared with the furthest-reaching one before it in offset
  // order (not merely its neighbour, which may be an empty tensor or a short one nested in a long one).
  std::vector<const TensorInfo*> sorted;
  for (const auto& [_, info] : tensors_) {
    if (info.nbytes != 0) sorted.push_back(&info);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  const TensorInfo* reach = nullptr;  // the tensor with the largest end so far
  for (const TensorInfo* t : sorted) {
    if (reach) {
      DSI_CHECK(t->offset >= reach->offset + reach->nbytes, path, ": tensors \"", reach->name, "\" and \"",
                t->name, "\" overlap (corrupt header)");
    }
    if (!reach || t->offset + t->nbytes > reach->offset + reach->nbytes) reach = t;
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  DSI_CHECK(it != tensors_.end(), path_, ": no tensor named \"", name, "\"");
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo& i = info(name);
  const auto* base = static_cast<const uint8_t*>(mapping_.get()) + data_start_ + i.offset;
  return Tensor::borrow(base, i.dtype, i.shape, mapping_);
}

SafetensorsArchive SafetensorsArchive::open_file(const std::string& path) {
  SafetensorsArchive archive;
  auto file = std::make_shared<SafetensorsFile>(path);
  archive.files_.push_back(file);
  for (const auto& [name, _] : file->tensors()) archive.where_[name] = 0;
  return archive;
}

SafetensorsArchive SafetensorsArchive::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  DSI_CHECK(fs::is_directory(dir), "model directory ", dir, " does not exist");
  SafetensorsArchive archive;
  fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(buffer.str());
    } catch (const nlohmann::json::parse_error& e) {
      fail(index_path.string(), ": invalid JSON: ", e.what());
    }
    DSI_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
              index_path.string(), ": missing \"weight_map\" object");
    std::set<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      DSI_CHECK(it.value().is_string(), index_path.string(), ": weight_map entry \"", it.key(),
                "\" is not a file name");
      std::string shard = it.value().get<std::string>();
      DSI_CHECK(shard.find('/') == std::string::npos && shard.find("..") == std::string::npos,
                index_path.string(), ": weight_map entry \"", it.key(),
                "\" names a file outside the directory");
      weight_map[it.key()] = shard;
      shards.insert(shard);
    }
    shard_names.assign(shards.begin(), shards.end());
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".safetensors" && name != "golden.safetensors")
        shard_names.push_back(name);
    }
    std::sort(shard_names.begin(), shard_names.end());
  }
  DSI_CHECK(!shard_names.empty(), "no safetensors weights found in ", dir);
  std::map<std::string, size_t> shard_index;
  for (const std::string& shard : shard_names) {
    std::string path = (fs::path(dir) / shard).string();
    DSI_CHECK(fs::exists(path), "shard ", path, " listed in model.safetensors.index.json is missing");
    shard_index[shard] = archive.files_.size();
    archive.files_.push_back(std::make_shared<SafetensorsFile>(path));
  }
  if (!weight_map.empty()) {
    for (const auto& [name, shard] : weight_map) {
      size_t idx = shard_index.at(shard);
      DSI_CHECK(archive.files_[idx]->contains(name), archive.files_[idx]->path(), ": tensor \"", name,
                "\" listed in model.safetensors.index.json is not in the file");
      archive.where_[name] = idx;
    }
  } else {
    for (size_t i = 0; i < archive.files_.size(); ++i) {
      for (const auto& [name, _] : archive.files_[i]->tensors()) archive.where_[name] = i;
    }
  }
  return archive;
}

const TensorInfo& SafetensorsArchive::info(const std::string& name) const {
  auto it = where_.find(name);
  DSI_CHECK(it != where_.end(), "checkpoint has no tensor named \"", name, "\"");
  return files_[it->second]->info(name);
}

Tensor SafetensorsArchive::get(const std::string& name) const {
  auto it = where_.find(name);
  DSI_CHECK(it != where_.end(), "checkpoint has no tensor named \"", name, "\"");
  return files_[it->second]->get(name);
}

const std::string& SafetensorsArchive::file_of(const std::string& name) const {
  auto it = where_.find(name);
  DSI_CHECK(it != where_.end(), "checkpoint has no tensor named \"", name, "\"");
  return files_[it->second]->path();
}

std::vector<std::string> SafetensorsArchive::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

size_t SafetensorsArchive::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, idx] : where_) n += files_[idx]->info(name).nbytes;
  return n;
}

}  // namespace dsinfer
