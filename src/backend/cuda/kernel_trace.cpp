// Kernel trace through CUPTI's activity API (see kernel_trace.h). CUPTI hands back buffers of kernel (and
// copy) records (start/end on the GPU's clock); they are summed per kernel name, kept (up to kMaxSpans) for
// the timeline attribution (kernel_timeline.h), and written at process exit.
#include "backend/cuda/kernel_trace.h"

#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/kernel_timeline.h"
#include "core/log.h"

namespace dsinfer::cuda {
namespace {

using RegisterFn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
using EnableFn = CUptiResult (*)(CUpti_ActivityKind);
using FlushFn = CUptiResult (*)(uint32_t);
using NextFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);

struct KernelTotal {
  uint64_t ns = 0;
  uint64_t count = 0;
};

struct TraceState {
  std::string path;
  FlushFn flush = nullptr;
  NextFn next = nullptr;
  std::mutex mu;
  std::map<std::string, KernelTotal> totals;  // by demangled name
  std::map<std::string, uint32_t> ids;        // name -> index into the spans' names
  std::vector<KernelSpan> spans;              // the first kMaxSpans kernels
  uint64_t dropped = 0;                       // kernels past kMaxSpans
  uint64_t first_start = UINT64_MAX, last_end = 0;
};

constexpr size_t kMaxSpans = size_t{1} << 22;  // 4M kernels, 64 MiB

TraceState* g_trace = nullptr;

constexpr size_t kBufferBytes = size_t{8} << 20;

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : name;
  std::free(d);
  return out;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

// One kernel, copy or memset: into the per-name totals and (up to kMaxSpans) the timeline.
void add_span(TraceState& t, const std::string& name, uint64_t start, uint64_t end) {
  KernelTotal& total = t.totals[name];
  total.ns += end - start;
  total.count += 1;
  if (t.spans.size() < kMaxSpans) {
    const auto id = t.ids.emplace(name, static_cast<uint32_t>(t.ids.size())).first->second;
    t.spans.push_back({start, end, id});
  } else {
    ++t.dropped;
  }
  t.first_start = std::min<uint64_t>(t.first_start, start);
  t.last_end = std::max<uint64_t>(t.last_end, end);
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  TraceState* t = g_trace;
  if (t != nullptr) {
    std::lock_guard<std::mutex> lock(t->mu);
    CUpti_Activity* record = nullptr;
    while (t->next(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
          record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        add_span(*t, demangle(k->name), k->start, k->end);
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        const char* kind = c->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "host to device"
                           : c->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "device to host"
                           : c->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "device to device"
                                                                            : "other";
        add_span(*t, std::string("[copy ") + kind + "]", c->start, c->end);
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        add_span(*t, "[memset]", m->start, m->end);
      }
    }
  }
  std::free(buffer);
}

void write_trace() {
  TraceState* t = g_trace;
  if (t == nullptr) return;
  t->flush(1);  // forces the completion callback for every buffer still open
  std::lock_guard<std::mutex> lock(t->mu);
  std::vector<std::pair<std::string, KernelTotal>> rows(t->totals.begin(), t->totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  uint64_t all = 0, launches = 0;
  for (const auto& r : rows) {
    all += r.second.ns;
    launches += r.second.count;
  }
  FILE* f = std::fopen(t->path.c_str(), "w");
  if (f == nullptr) {
    log_warn("DSINFER_KERNEL_TRACE: cannot write ", t->path);
    return;
  }
  // The last DSINFER_KERNEL_TRACE_TAIL kernels in start order (a few decode steps' timeline), copied before
  // the attribution takes the spans.
  std::vector<KernelSpan> tail;
  if (const char* n = std::getenv("DSINFER_KERNEL_TRACE_TAIL"); n != nullptr)
    tail = last_in_start_order(t->spans, std::strtoull(n, nullptr, 10));
  // The timeline attribution: what each kernel adds to the busy timeline, and the idle time before it.
  std::vector<KernelWall> walls(t->ids.size());
  if (!t->spans.empty()) walls = attribute_timeline(std::move(t->spans), t->ids.size());
  uint64_t all_wall = 0, all_idle = 0;
  for (const KernelWall& w : walls) all_wall += w.wall_ns, all_idle += w.idle_before_ns;
  const double span_us = t->last_end > t->first_start ? (t->last_end - t->first_start) / 1e3 : 0.0;
  std::fprintf(f, "# kernel time %.1f us in %llu launches over a span of %.1f us\n", all / 1e3,
               static_cast<unsigned long long>(launches), span_us);
  std::fprintf(
      f,
      "# timeline: %.1f us with a kernel running (wall: what each kernel adds to it, overlaps counted "
      "once), %.1f us idle%s\n",
      all_wall / 1e3, all_idle / 1e3, t->dropped ? " (only the first 4M kernels attributed)" : "");
  std::fprintf(f, "# total_us\tlaunches\tmean_us\tshare\twall_us\tidle_before_us\tkernel\n");
  for (const auto& [name, total] : rows) {
    const auto id = t->ids.find(name);
    const KernelWall w = id == t->ids.end() ? KernelWall{} : walls[id->second];
    std::fprintf(f, "%.1f\t%llu\t%.2f\t%.1f%%\t%.1f\t%.1f\t%s\n", total.ns / 1e3,
                 static_cast<unsigned long long>(total.count),
                 total.ns / 1e3 / static_cast<double>(total.count), all ? 100.0 * total.ns / all : 0.0,
                 w.wall_ns / 1e3, w.idle_before_ns / 1e3, name.substr(0, 160).c_str());
  }
  if (!tail.empty()) {
    std::vector<const std::string*> names(t->ids.size());
    for (const auto& [name, id] : t->ids) names[id] = &name;
    std::fprintf(
        f, "# the last %zu kernels: start_us\tend_us\tduration_us\tkernel (times from the first's start)\n",
        tail.size());
    const uint64_t t0 = tail.front().start;
    for (const KernelSpan& s : tail)
      std::fprintf(f, "%.2f\t%.2f\t%.2f\t%s\n", (s.start - t0) / 1e3, (s.end - t0) / 1e3,
                   (s.end - s.start) / 1e3, names[s.name]->substr(0, 120).c_str());
  }
  std::fclose(f);
}

// The CUPTI library beside the CUDA toolkit or on the loader's path.
void* open_cupti() {
  for (const char* name :
       {"libcupti.so", "libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so",
        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib/libcupti.so"}) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

}  // namespace

void start_kernel_trace_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("DSINFER_KERNEL_TRACE");
    if (path == nullptr || *path == '\0') return;
    void* lib = open_cupti();
    if (lib == nullptr) {
      log_warn("DSINFER_KERNEL_TRACE: libcupti not found (", dlerror(), "); no kernel trace");
      return;
    }
    auto reg = reinterpret_cast<RegisterFn>(dlsym(lib, "cuptiActivityRegisterCallbacks"));
    auto enable = reinterpret_cast<EnableFn>(dlsym(lib, "cuptiActivityEnable"));
    auto flush = reinterpret_cast<FlushFn>(dlsym(lib, "cuptiActivityFlushAll"));
    auto next = reinterpret_cast<NextFn>(dlsym(lib, "cuptiActivityGetNextRecord"));
    if (!reg || !enable || !flush || !next) {
      log_warn("DSINFER_KERNEL_TRACE: libcupti lacks the activity API; no kernel trace");
      return;
    }
    auto* t = new TraceState;  // lives to the end of the process
    t->path = path;
    t->flush = flush;
    t->next = next;
    g_trace = t;
    if (reg(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
      log_warn("DSINFER_KERNEL_TRACE: CUPTI refused the kernel activity; no kernel trace");
      g_trace = nullptr;
      return;
    }
    // Copies and memsets sit on the same stream between kernels: the timeline shows them too (optional).
    if (enable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        enable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS)
      log_warn("DSINFER_KERNEL_TRACE: CUPTI refused the copy activity; kernels only");
    std::atexit(write_trace);
  });
}

}  // namespace dsinfer::cuda
