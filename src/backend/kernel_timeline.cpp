// attribute_timeline (kernel_timeline.h): one pass over the kernels in start order; last_in_start_order.
#include "backend/kernel_timeline.h"

#include <algorithm>
#include <cstddef>

#include "core/error.h"

namespace dsinfer {

namespace {

bool starts_first(const KernelSpan& a, const KernelSpan& b) {
  return a.start != b.start ? a.start < b.start : a.end < b.end;
}

}  // namespace

std::vector<KernelSpan> last_in_start_order(std::vector<KernelSpan> spans, size_t n) {
  n = std::min(n, spans.size());
  // The n latest to the back (unordered), then only they are sorted.
  std::nth_element(spans.begin(), spans.end() - static_cast<std::ptrdiff_t>(n), spans.end(), starts_first);
  spans.erase(spans.begin(), spans.end() - static_cast<std::ptrdiff_t>(n));
  std::sort(spans.begin(), spans.end(), starts_first);
  return spans;
}

std::vector<KernelWall> attribute_timeline(std::vector<KernelSpan> spans, size_t names) {
  std::vector<KernelWall> out(names);
  std::sort(spans.begin(), spans.end(), starts_first);
  bool first = true;
  uint64_t covered = 0;  // the latest end of the kernels walked so far
  for (const KernelSpan& s : spans) {
    DSI_CHECK(s.name < names, "attribute_timeline: name index ", s.name, " of ", names);
    DSI_CHECK(s.end >= s.start, "attribute_timeline: a kernel ends (", s.end, ") before it starts (", s.start,
              ")");
    if (first) {
      covered = s.start;
      first = false;
    }
    if (s.start > covered) {
      out[s.name].idle_before_ns += s.start - covered;
      covered = s.start;
    }
    if (s.end > covered) {
      out[s.name].wall_ns += s.end - covered;
      covered = s.end;
    }
  }
  return out;
}

}  // namespace dsinfer
