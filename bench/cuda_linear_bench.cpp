// Linear-layer micro-benchmark for the CUDA backend on the Llama-3.1-8B shapes (hidden 4096, 32 q / 8 kv
// heads of 128, intermediate 14336, vocab 128256), in the forms a decode step uses them: qkv with the
// RMSNorm fused (one launch), o with the residual add, gate+up as one SwiGLU launch with the norm, down
// with the residual add, lm_head with the norm. For M in {1, 8} the GEMV kernels (every kernel shape) and
// cuBLASLt; for larger M cuBLASLt with bf16 activations. Each row is a CUDA graph of launches over enough
// weight copies to defeat the 50 MB L2, timed by events; GB/s counts weight bytes only.
// --l2-resident adds, for matrices that fit in L2, the default GEMV re-reading one copy (weights in L2).
// Usage: cuda_linear_bench [--reps N] [--peak-gbs 4290] [--quick] [--l2-resident]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#endif

#ifdef DSINFER_HAVE_CUDA
namespace {

using namespace dsinfer;

// A device buffer of `count` elements of T.
template <typename T>
struct DevBuf {
  T* ptr = nullptr;
  explicit DevBuf(size_t count) {
    ptr = static_cast<T*>(cuda::device_alloc(count * sizeof(T)));
    if (!ptr) {
      std::fprintf(stderr, "out of device memory (%zu bytes)\n", count * sizeof(T));
      std::exit(1);
    }
  }
  ~DevBuf() { cuda::device_free(ptr); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// Fills n bf16 values on the device with random values in [-1, 1) (a repeated 16 MiB pattern).
void fill_bf16(uint16_t* dst, size_t n) {
  static std::vector<uint16_t> pattern = [] {
    std::vector<uint16_t> p(size_t{8} << 20);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (auto& v : p) {
      const float f = d(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      v = static_cast<uint16_t>(bits >> 16);
    }
    return p;
  }();
  for (size_t off = 0; off < n; off += pattern.size())
    cuda::copy_to_device(dst + off, pattern.data(), std::min(pattern.size(), n - off) * sizeof(uint16_t));
}

void fill_f32(float* dst, size_t n) {
  std::vector<float> h(n);
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : h) v = d(rng);
  cuda::copy_to_device(dst, h.data(), n * sizeof(float));
}

// One benchmark shape: `mats` weight matrices [N_i, K] read per call.
struct Shape {
  std::string name;
  std::vector<int64_t> N;
  int64_t K;
  enum Kind { kNormLinears, kResidual, kSwiglu } kind;
};

struct Options {
  int reps = 20;
  double peak_gbs = 4290.0;
  bool quick = false;
  bool l2_resident = false;  // also time the default GEMV re-reading one copy (weights hit L2)
};

void print_row(const Shape& s, int64_t M, const std::string& kernel, double ms, double weight_bytes,
               const Options& o) {
  int64_t n_total = 0;
  for (int64_t n : s.N) n_total += n;
  const double gbs = weight_bytes / (ms * 1e-3) / 1e9;
  const double tflops = 2.0 * M * n_total * s.K / (ms * 1e-3) / 1e12;
  std::printf("%-9s %5lld  %-22s %9.2f  %8.0f  %6.1f%%  %7.1f\n", s.name.c_str(), static_cast<long long>(M),
              kernel.c_str(), ms * 1e3, gbs, 100.0 * gbs / o.peak_gbs, tflops);
  std::fflush(stdout);
}

// Times one shape at one M on every applicable kernel; returns the default GEMV kernel's ms (M <= 8) or
// cuBLASLt's.
double bench_shape(const Shape& s, int64_t M, const Options& o) {
  int64_t n_total = 0;
  for (int64_t n : s.N) n_total += n;
  const double weight_bytes = 2.0 * n_total * s.K;
  // Enough copies of the weights that a graph of launches streams >= 400 MB (no L2 reuse).
  const int copies = static_cast<int>(std::max<double>(2.0, std::ceil(400e6 / weight_bytes)));
  std::vector<std::unique_ptr<DevBuf<uint16_t>>> w;  // per copy: all matrices back to back
  for (int c = 0; c < copies; ++c) {
    w.push_back(std::make_unique<DevBuf<uint16_t>>(static_cast<size_t>(n_total * s.K)));
    fill_bf16(w.back()->ptr, static_cast<size_t>(n_total * s.K));
  }
  DevBuf<uint16_t> norm(static_cast<size_t>(s.K));
  fill_bf16(norm.ptr, static_cast<size_t>(s.K));
  DevBuf<float> x(static_cast<size_t>(M * s.K));
  fill_f32(x.ptr, static_cast<size_t>(M * s.K));
  DevBuf<uint16_t> xb(static_cast<size_t>(M * s.K));
  fill_bf16(xb.ptr, static_cast<size_t>(M * s.K));
  DevBuf<float> y(static_cast<size_t>(M * n_total));
  fill_f32(y.ptr, static_cast<size_t>(M * n_total));

  auto mat_ptr = [&](int c, size_t i) {
    int64_t off = 0;
    for (size_t j = 0; j < i; ++j) off += s.N[j] * s.K;
    return w[c]->ptr + off;
  };
  auto gemv_call = [&](int c, cuda::GemvConfig cfg) {
    const cuda::GemvNorm nrm{s.kind == Shape::kResidual ? nullptr : norm.ptr, 1e-5f};
    if (s.kind == Shape::kSwiglu) {
      cuda::launch_gemv_swiglu(x.ptr, M, s.K, mat_ptr(c, 0), nullptr, mat_ptr(c, 1), nullptr, y.ptr, s.N[0],
                               nrm, 0.0f, cfg);
      return;
    }
    cuda::GemvMatrix mats[cuda::kGemvMaxMatrices];
    int64_t yoff = 0;
    for (size_t i = 0; i < s.N.size(); ++i) {
      mats[i] = {mat_ptr(c, i), nullptr, y.ptr + yoff, s.N[i]};
      yoff += M * s.N[i];
    }
    cuda::launch_gemv(x.ptr, M, s.K, mats, static_cast<int>(s.N.size()), nrm, s.kind == Shape::kResidual,
                      cfg);
  };
  auto cublas_call = [&](int c) {
    int64_t yoff = 0;
    for (size_t i = 0; i < s.N.size(); ++i) {
      cuda::gemm_bf16(xb.ptr, mat_ptr(c, i), nullptr, y.ptr + yoff, M, s.N[i], s.K,
                      s.kind == Shape::kResidual);
      yoff += M * s.N[i];
    }
  };

  double best = 0.0;
  if (M <= cuda::kGemvMaxRows) {
    // The default kernel first, then every compiled shape.
    const bool swiglu = s.kind == Shape::kSwiglu;
    std::vector<std::pair<std::string, cuda::GemvConfig>> cfgs = {{"gemv default", cuda::GemvConfig{}}};
    for (const cuda::GemvConfig& c : cuda::gemv_configs(swiglu))
      cfgs.push_back({"gemv w" + std::to_string(c.warps) + " t" + std::to_string(c.tiles) + " u" +
                          std::to_string(c.unroll) + " s" + std::to_string(c.stages) + " x" +
                          std::to_string(c.splits) + (c.persist > 0 ? " p" + std::to_string(c.persist) : ""),
                      c});
    if (o.quick) cfgs.resize(1);
    for (const auto& [name, cfg] : cfgs) {
      const double ms = cuda::time_graph_ms(
                            [&] {
                              for (int c = 0; c < copies; ++c) gemv_call(c, cfg);
                            },
                            o.reps) /
                        copies;
      if (best == 0.0) best = ms;
      print_row(s, M, name, ms, weight_bytes, o);
    }
    const double ms_stream = cuda::time_stream_ms(
                                 [&] {
                                   for (int c = 0; c < copies; ++c) gemv_call(c, cfgs[0].second);
                                 },
                                 o.reps) /
                             copies;
    print_row(s, M, "gemv default, no graph", ms_stream, weight_bytes, o);
    // The same launches over one copy, without the evict-first hint, when the matrices fit in about half of
    // L2: after the first launch every launch reads weights L2 holds (what a GEMV could take if its weights
    // were brought into L2 while an earlier kernel ran).
    if (o.l2_resident && weight_bytes <= 36e6) {
      const bool evict_first = cuda::gemv_weights_evict_first();
      cuda::gemv_set_weights_evict_first(false);
      const double ms_l2 = cuda::time_graph_ms(
                               [&] {
                                 for (int c = 0; c < copies; ++c) gemv_call(0, cfgs[0].second);
                               },
                               o.reps) /
                           copies;
      cuda::gemv_set_weights_evict_first(evict_first);
      print_row(s, M, "gemv default, L2 hits", ms_l2, weight_bytes, o);
    }
  }
  const double ms = cuda::time_graph_ms(
                        [&] {
                          for (int c = 0; c < copies; ++c) cublas_call(c);
                        },
                        o.reps) /
                    copies;
  print_row(s, M, "cublasLt bf16", ms, weight_bytes, o);
  if (best == 0.0) best = ms;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      o.reps = std::atoi(argv[++i]);
    } else if (a == "--peak-gbs" && i + 1 < argc) {
      o.peak_gbs = std::atof(argv[++i]);
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--l2-resident") {
      o.l2_resident = true;
    } else {
      std::fprintf(stderr,
                   "usage: cuda_linear_bench [--reps N] [--peak-gbs GB/s] [--quick] [--l2-resident]\n");
      return 2;
    }
  }
  if (!cuda::device_available()) {
    std::printf("no CUDA device visible\n");
    return 0;
  }
  const std::vector<Shape> shapes = {{"qkv", {4096, 1024, 1024}, 4096, Shape::kNormLinears},
                                     {"o", {4096}, 4096, Shape::kResidual},
                                     {"gate_up", {14336, 14336}, 4096, Shape::kSwiglu},
                                     {"down", {4096}, 14336, Shape::kResidual},
                                     {"lm_head", {128256}, 4096, Shape::kNormLinears}};
  cuda::gemm_reserve(2048, 14336);
  std::printf("%-9s %5s  %-22s %9s  %8s  %7s  %7s\n", "shape", "M", "kernel", "time_us", "GB/s", "%peak",
              "TFLOP/s");
  std::vector<double> step_ms;  // per M: one decode step's linear layers (32 layers + lm_head)
  const std::vector<int64_t> Ms = {1, 8, 64, 256, 2048};
  for (int64_t M : Ms) {
    double layer = 0.0, head = 0.0;
    for (const Shape& s : shapes) {
      const double ms = bench_shape(s, M, o);
      (s.name == "lm_head" ? head : layer) += ms;
    }
    step_ms.push_back(32 * layer + head);
  }
  std::printf("\nlinear layers of one Llama-3.1-8B forward (32 layers + lm_head), best default kernel:\n");
  for (size_t i = 0; i < Ms.size(); ++i)
    std::printf("  M %5lld: %8.3f ms  (%.0f tokens/s of GEMM time)\n", static_cast<long long>(Ms[i]),
                step_ms[i], 1e3 * Ms[i] / step_ms[i]);
  return 0;
}

#else
int main() {
  std::printf("built without CUDA\n");
  return 0;
}
#endif
