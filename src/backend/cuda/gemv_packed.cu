// The decode GEMV's packed weights (gemv_packed.h): the packing kernel and the registry.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

int64_t row_groups(int64_t N) {
  return (N + 63) / 64 * 4;
}
int64_t column_chunks(int64_t K) {
  return (K + 31) / 32;
}

// One thread per 16-byte piece: piece ((r * C + c) * 2 + h) * 32 + lane holds w[16 r + lane / 4 + 8 h]
// [32 c + 8 (lane % 4), + 8), zeros outside [N, K].
__global__ void pack_kernel(const uint16_t* w, int64_t N, int64_t K, int64_t C, int64_t pieces, uint4* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pieces) return;
  const int lane = static_cast<int>(i % 32), h = static_cast<int>(i / 32 % 2);
  const int64_t frag = i / 64, c = frag % C, r = frag / C;
  const int64_t row = 16 * r + lane / 4 + 8 * h, col = 32 * c + 8 * (lane % 4);
  uint4 v = make_uint4(0, 0, 0, 0);
  if (row < N && col < K) v = *reinterpret_cast<const uint4*>(w + row * K + col);
  out[i] = v;
}

struct Entry {
  const uint16_t* packed;
  int64_t N, K;
};

// Never destroyed: a weight freed during static destruction still unregisters safely.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<const uint16_t*, Entry>& registry() {
  static auto* r = new std::unordered_map<const uint16_t*, Entry>;
  return *r;
}

}  // namespace

int64_t gemv_packed_bytes(int64_t N, int64_t K) {
  return row_groups(N) * column_chunks(K) * 1024;
}

bool gemv_wants_packed_copy(const char* name, int64_t N, int64_t K) {
  static const int mode = env_choice("DSINFER_GEMV_PACKED", {"0", "1", "auto"}, 2);
  if (mode == 0 || arch_path() != ArchPath::kHopper || !gemv_packable(N, K)) return false;
  // The name endings that get a copy (DSINFER_GEMV_PACKED_NAMES, a comma list, read once), never an expert's.
  static const std::string endings = [] {
    const char* v = std::getenv("DSINFER_GEMV_PACKED_NAMES");
    return std::string(v && *v ? v : kGemvPackedNames);
  }();
  const std::string_view n(name), list(endings);
  bool named = false;
  for (size_t at = 0; at <= list.size() && !named;) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string_view tail = list.substr(at, comma - at);
    named = !tail.empty() && n.size() >= tail.size() && n.substr(n.size() - tail.size()) == tail;
    at = comma + 1;
  }
  if (!named || n.find("experts") != std::string_view::npos) return false;
  return mode == 1 || gemv_packed_copy_fits(gemv_packed_bytes(N, K));
}

bool gemv_packed_copy_fits(int64_t bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const double left = static_cast<double>(free_bytes) - static_cast<double>(bytes);
  return left >= kGemvPackedFreeFraction * static_cast<double>(total_bytes);
}

bool gemv_packable(int64_t N, int64_t K) {
  return N >= 64 && K >= 256 && K % 32 == 0;
}

void pack_gemv_weight(const uint16_t* w, int64_t N, int64_t K, uint16_t* packed) {
  DSI_CHECK(N > 0 && K > 0 && K % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(packed) % 16 == 0,
            "pack_gemv_weight: unsupported [", N, ", ", K, "] or unaligned pointers");
  const int64_t pieces = gemv_packed_bytes(N, K) / 16;
  constexpr int kThreads = 256;
  pack_kernel<<<static_cast<unsigned>((pieces + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(
      w, N, K, column_chunks(K), pieces, reinterpret_cast<uint4*>(packed));
  check_launch("pack_gemv_weight");
  check_cuda(cudaStreamSynchronize(stream()), "pack_gemv_weight");
}

void gemv_register_packed(const uint16_t* w, const uint16_t* packed, int64_t N, int64_t K) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[w] = {packed, N, K};
}

void gemv_unregister_packed(const uint16_t* w) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(w);
}

const uint16_t* gemv_packed_for(const uint16_t* w, int64_t N, int64_t K) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  const auto it = registry().find(w);
  if (it == registry().end() || it->second.N != N || it->second.K != K) return nullptr;
  return it->second.packed;
}

}  // namespace dsinfer::cuda
