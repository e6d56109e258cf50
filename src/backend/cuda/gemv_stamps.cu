// The persistent GEMV's stamp buffer (see gemv_stamps.h): host code only. The kernel side is in
// gemv_persistent.cuh (the STAMPS instances); the launches take their slots in gemv_kernels.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/cuda/gemv_stamp_summary.h"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/runtime.h"
#include "core/env_choice.h"

namespace dsinfer::cuda {
namespace {

struct StampState {
  uint64_t* buffer = nullptr;         // [slots][kGemvStampMaxBlocks][kGemvStampFields]
  std::vector<GemvStampLaunch> meta;  // per slot: the launch shape (blocks empty)
  int64_t handed = 0;                 // slots handed out so far (the next is handed % size)
  std::mutex mu;
};

StampState& state() {
  static StampState s;
  return s;
}

constexpr size_t slot_values() {
  return static_cast<size_t>(kGemvStampMaxBlocks) * kGemvStampFields;
}

std::string g_path;  // DSINFER_GEMV_STAMPS

// Whether a buffer is there: every GEMV launch asks, so the answer comes without the mutex.
std::atomic<bool> g_on{false};

void write_at_exit() {
  {
    StampState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.handed > static_cast<int64_t>(s.meta.size()))
      std::fprintf(stderr, "DSINFER_GEMV_STAMPS: %lld launches over %zu slots; %s holds the latest\n",
                   static_cast<long long>(s.handed), s.meta.size(), g_path.c_str());
  }
  const std::vector<GemvStampLaunch> launches = read_gemv_stamps();
  if (!write_gemv_stamps(g_path.c_str(), launches))
    std::fprintf(stderr, "DSINFER_GEMV_STAMPS: cannot write %s\n", g_path.c_str());
}

}  // namespace

bool enable_gemv_stamps(int slots) {
  disable_gemv_stamps();
  StampState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (slots <= 0) return false;
  const size_t bytes = sizeof(uint64_t) * slot_values() * static_cast<size_t>(slots);
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes) != cudaSuccess || cudaMemset(ptr, 0, bytes) != cudaSuccess) {
    cudaGetLastError();
    if (ptr) cudaFree(ptr);
    return false;
  }
  s.buffer = static_cast<uint64_t*>(ptr);
  s.meta.assign(static_cast<size_t>(slots), GemvStampLaunch{});
  s.handed = 0;
  g_on.store(true);
  return true;
}

void disable_gemv_stamps() {
  StampState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  g_on.store(false);
  if (s.buffer) {
    cudaFree(s.buffer);   // synchronises: no kernel still writes stamps into it
    invalidate_graphs();  // captured launches baked its address in
  }
  s.buffer = nullptr;
  s.meta.clear();
  s.handed = 0;
}

bool gemv_stamps_on() {
  return g_on.load(std::memory_order_relaxed);
}

uint64_t* next_gemv_stamp_slot(int64_t rows, int64_t K, bool swiglu, int64_t grid, int64_t tiles) {
  if (!g_on.load(std::memory_order_relaxed)) return nullptr;
  StampState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.buffer == nullptr || grid > kGemvStampMaxBlocks) return nullptr;
  const size_t slot = static_cast<size_t>(s.handed++ % static_cast<int64_t>(s.meta.size()));
  GemvStampLaunch& m = s.meta[slot];
  m.rows = rows;
  m.K = K;
  m.swiglu = swiglu;
  m.grid = grid;
  m.tiles = tiles;
  return s.buffer + slot * slot_values();
}

std::vector<GemvStampLaunch> read_gemv_stamps() {
  StampState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<GemvStampLaunch> out;
  if (s.buffer == nullptr || s.handed == 0) return out;
  const int64_t size = static_cast<int64_t>(s.meta.size());
  const int64_t used = std::min(s.handed, size);
  // Only the slots handed out: until the round robin wraps they are the first `used`.
  std::vector<uint64_t> host(slot_values() * static_cast<size_t>(used));
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(host.data(), s.buffer, sizeof(uint64_t) * host.size(), cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  for (int64_t i = s.handed - used; i < s.handed; ++i) {
    const size_t slot = static_cast<size_t>(i % size);
    GemvStampLaunch l = s.meta[slot];
    l.blocks.resize(static_cast<size_t>(l.grid));
    const uint64_t* v = host.data() + slot * slot_values();
    for (int64_t b = 0; b < l.grid; ++b, v += kGemvStampFields) {
      GemvStampBlock& blk = l.blocks[static_cast<size_t>(b)];
      std::copy(v, v + kStampPoints, blk.t);
      blk.sm = static_cast<uint32_t>(v[kStampFieldSm]);
      blk.tiles = static_cast<uint32_t>(v[kStampFieldTiles]);
    }
    out.push_back(std::move(l));
  }
  return out;
}

bool write_gemv_stamps(const char* path, const std::vector<GemvStampLaunch>& launches) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  uint64_t t0 = UINT64_MAX;
  for (const GemvStampLaunch& l : launches)
    for (const GemvStampBlock& b : l.blocks)
      if (b.t[kStampStart] != 0) t0 = std::min(t0, b.t[kStampStart]);
  std::fprintf(
      f,
      "# persistent GEMV block stamps, us from the earliest start (%llu ns on the GPU's global timer): "
      "launch lines, then per block: block sm tiles start issued waited consumed last_issue end\n",
      static_cast<unsigned long long>(t0 == UINT64_MAX ? 0 : t0));
  std::fprintf(
      f,
      "# summary per launch shape (medians over its launches, us): rows K swiglu launches grid weight_MB "
      "wait_to_first_stage wait_to_last_end last_end_minus_median_end last_issue_to_end sms_min sms_max\n");
  for (const GemvStampShape& s : summarize_gemv_stamps(launches))
    std::fprintf(f, "# shape %lld %lld %d %d %lld %.1f %.2f %.2f %.2f %.2f %d %d\n",
                 static_cast<long long>(s.rows), static_cast<long long>(s.K), s.swiglu ? 1 : 0, s.launches,
                 static_cast<long long>(s.grid), static_cast<double>(s.weight_bytes) / 1e6,
                 s.wait_to_first_us, s.wait_to_end_us, s.end_tail_us, s.last_issue_to_end_us, s.sms_min,
                 s.sms_max);
  std::fprintf(
      f,
      "# handoffs between consecutive launches (medians, us): from_rows from_K from_swiglu to_rows to_K "
      "to_swiglu pairs last_end_to_next_first_wait\n");
  for (const GemvStampHandoff& h : summarize_gemv_handoffs(launches))
    std::fprintf(f, "# handoff %lld %lld %d %lld %lld %d %d %.2f\n", static_cast<long long>(h.from_rows),
                 static_cast<long long>(h.from_K), h.from_swiglu ? 1 : 0, static_cast<long long>(h.to_rows),
                 static_cast<long long>(h.to_K), h.to_swiglu ? 1 : 0, h.count, h.median_us);
  for (size_t i = 0; i < launches.size(); ++i) {
    const GemvStampLaunch& l = launches[i];
    std::fprintf(f, "launch %zu rows %lld K %lld swiglu %d grid %lld tiles %lld\n", i,
                 static_cast<long long>(l.rows), static_cast<long long>(l.K), l.swiglu ? 1 : 0,
                 static_cast<long long>(l.grid), static_cast<long long>(l.tiles));
    for (size_t b = 0; b < l.blocks.size(); ++b) {
      const GemvStampBlock& s = l.blocks[b];
      if (s.t[kStampStart] == 0) continue;  // did not run (or not in this slot's latest launch)
      std::fprintf(f, "%zu %u %u", b, s.sm, s.tiles);
      for (uint64_t t : s.t) std::fprintf(f, " %.3f", t >= t0 ? static_cast<double>(t - t0) / 1e3 : -1.0);
      std::fputc('\n', f);
    }
  }
  return std::fclose(f) == 0;
}

void start_gemv_stamps_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("DSINFER_GEMV_STAMPS");
    if (path == nullptr || *path == '\0') return;
    const int slots = env_int("DSINFER_GEMV_STAMP_SLOTS", 2048, 1, 1 << 16);
    if (!enable_gemv_stamps(slots)) {
      std::fprintf(stderr, "DSINFER_GEMV_STAMPS: no device memory for %d slots; no stamps\n", slots);
      return;
    }
    g_path = path;
    std::atexit(write_at_exit);
  });
}

}  // namespace dsinfer::cuda
