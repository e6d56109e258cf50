// The per-shape summary of recorded GEMV block stamps (gemv_stamps.h): for every launch shape, medians over
// its launches of where a launch's time goes after its PDL wait: the wait to the first consumed stage (the
// block median), the wait to the last block's end, how far the last block ends after the median block (the
// tail), and the last weight issue to the end (the pipeline drain and the epilogue); and for every pair of
// shapes that follow each other, the median handoff from one launch's last block end to the next launch's
// first PDL wait return (what the kernels between two GEMVs, and the handoff itself, take). Header-only host
// code (no CUDA), so the arithmetic is unit-tested without a GPU (tests/unit/gemv_stamp_summary_test.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "backend/cuda/gemv_stamps.h"

namespace dsinfer::cuda {

struct GemvStampShape {
  int64_t rows = 0, K = 0;
  bool swiglu = false;
  int launches = 0;          // launches of this shape with at least one block that ran
  int64_t grid = 0;          // blocks of the last of them
  int64_t weight_bytes = 0;  // bf16 weights one launch streams (SwiGLU: gate and up)
  double wait_to_first_us = 0, wait_to_end_us = 0, end_tail_us = 0, last_issue_to_end_us = 0;  // medians
  int sms_min = 0, sms_max = 0;  // SMs that ran a block, fewest and most over the launches
};

namespace gemv_stamp_detail {

// The middle value (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

inline double us(uint64_t later, uint64_t earlier) {
  return later >= earlier ? static_cast<double>(later - earlier) / 1e3
                          : -static_cast<double>(earlier - later) / 1e3;
}

// A launch's first PDL wait return and last block end (ns), over the blocks that ran; false when none did.
inline bool launch_span(const GemvStampLaunch& l, uint64_t& first_wait, uint64_t& last_end) {
  first_wait = UINT64_MAX;
  last_end = 0;
  for (const GemvStampBlock& b : l.blocks) {
    if (b.t[kStampStart] == 0) continue;
    first_wait = std::min(first_wait, b.t[kStampWaited]);
    last_end = std::max(last_end, b.t[kStampEnd]);
  }
  return last_end != 0;
}

}  // namespace gemv_stamp_detail

// The handoffs between consecutive stamped launches: launches in the order of their first wait return; for
// each pair (from, to) of shapes that follow each other, the median over such pairs of the time from `from`'s
// last block end to `to`'s first wait return (negative when `to` was let in before `from` ended). Pairs
// further apart than max_gap_us (the host between steps, launches of other steps) are left out.
struct GemvStampHandoff {
  int64_t from_rows = 0, from_K = 0, to_rows = 0, to_K = 0;
  bool from_swiglu = false, to_swiglu = false;
  int count = 0;
  double median_us = 0;
};
inline std::vector<GemvStampHandoff> summarize_gemv_handoffs(const std::vector<GemvStampLaunch>& launches,
                                                             double max_gap_us = 100.0) {
  using gemv_stamp_detail::launch_span;
  using gemv_stamp_detail::median;
  using gemv_stamp_detail::us;
  struct Span {
    uint64_t wait, end;
    const GemvStampLaunch* launch;
  };
  std::vector<Span> spans;
  for (const GemvStampLaunch& l : launches) {
    Span s{0, 0, &l};
    if (launch_span(l, s.wait, s.end)) spans.push_back(s);
  }
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.wait < b.wait; });
  struct Acc {
    GemvStampHandoff h;
    std::vector<double> gaps;
  };
  std::vector<Acc> accs;
  for (size_t i = 1; i < spans.size(); ++i) {
    const GemvStampLaunch& a = *spans[i - 1].launch;
    const GemvStampLaunch& b = *spans[i].launch;
    const double gap = us(spans[i].wait, spans[i - 1].end);
    if (gap > max_gap_us) continue;
    auto it = std::find_if(accs.begin(), accs.end(), [&](const Acc& x) {
      return x.h.from_rows == a.rows && x.h.from_K == a.K && x.h.from_swiglu == a.swiglu &&
             x.h.to_rows == b.rows && x.h.to_K == b.K && x.h.to_swiglu == b.swiglu;
    });
    if (it == accs.end()) {
      Acc x;
      x.h = GemvStampHandoff{a.rows, a.K, b.rows, b.K, a.swiglu, b.swiglu, 0, 0.0};
      accs.push_back(x);
      it = accs.end() - 1;
    }
    it->gaps.push_back(gap);
  }
  std::vector<GemvStampHandoff> out;
  for (Acc& x : accs) {
    x.h.count = static_cast<int>(x.gaps.size());
    x.h.median_us = median(x.gaps);
    out.push_back(x.h);
  }
  return out;
}

// One row per launch shape, in the order the shapes first appear.
inline std::vector<GemvStampShape> summarize_gemv_stamps(const std::vector<GemvStampLaunch>& launches) {
  using gemv_stamp_detail::median;
  using gemv_stamp_detail::us;
  struct Acc {
    GemvStampShape shape;
    std::vector<double> first, end, tail, drain;
  };
  std::vector<Acc> accs;
  for (const GemvStampLaunch& l : launches) {
    std::vector<const GemvStampBlock*> ran;
    for (const GemvStampBlock& b : l.blocks)
      if (b.t[kStampStart] != 0) ran.push_back(&b);
    if (ran.empty()) continue;
    auto it = std::find_if(accs.begin(), accs.end(), [&](const Acc& a) {
      return a.shape.rows == l.rows && a.shape.K == l.K && a.shape.swiglu == l.swiglu;
    });
    if (it == accs.end()) {
      Acc a;
      a.shape.rows = l.rows;
      a.shape.K = l.K;
      a.shape.swiglu = l.swiglu;
      a.shape.weight_bytes = l.rows * l.K * 2 * (l.swiglu ? 2 : 1);
      a.shape.sms_min = 1 << 30;
      accs.push_back(a);
      it = accs.end() - 1;
    }
    uint64_t wait = 0, last_end = 0;
    gemv_stamp_detail::launch_span(l, wait, last_end);
    std::vector<double> first, ends, drain;
    std::set<uint32_t> sms;
    for (const GemvStampBlock* b : ran) {
      first.push_back(us(b->t[kStampConsumed], b->t[kStampWaited]));
      drain.push_back(us(b->t[kStampEnd], b->t[kStampLastIssue]));
      sms.insert(b->sm);
    }
    for (const GemvStampBlock* b : ran) ends.push_back(us(b->t[kStampEnd], wait));
    Acc& a = *it;
    ++a.shape.launches;
    a.shape.grid = l.grid;
    a.shape.sms_min = std::min(a.shape.sms_min, static_cast<int>(sms.size()));
    a.shape.sms_max = std::max(a.shape.sms_max, static_cast<int>(sms.size()));
    a.first.push_back(median(first));
    a.end.push_back(us(last_end, wait));
    a.tail.push_back(us(last_end, wait) - median(ends));
    a.drain.push_back(median(drain));
  }
  std::vector<GemvStampShape> out;
  for (Acc& a : accs) {
    a.shape.wait_to_first_us = median(a.first);
    a.shape.wait_to_end_us = median(a.end);
    a.shape.end_tail_us = median(a.tail);
    a.shape.last_issue_to_end_us = median(a.drain);
    out.push_back(a.shape);
  }
  return out;
}

}  // namespace dsinfer::cuda
