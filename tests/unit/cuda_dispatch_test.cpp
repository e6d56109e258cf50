// Architecture dispatch by compute capability (backend/cuda/arch_path.h) and the CUDA op registry
// (backend/cuda/cuda_op_registry.h): pure host logic, runs without a GPU. The registry is also checked
// against the source so that it cannot drift: every Backend virtual op has a row, and every kernel it
// names is declared in a header of src/backend/cuda.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "model/model_config.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/arch_path.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_op_registry.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(DSINFER_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ArchPath, ChosenFromTheComputeCapability) {
  EXPECT_EQ(cuda::choose_arch_path(9, 0, "H200", "auto"), cuda::ArchPath::kHopper);
  EXPECT_EQ(cuda::choose_arch_path(9, 0, "H100", ""), cuda::ArchPath::kHopper);
  EXPECT_EQ(cuda::choose_arch_path(8, 0, "A100", "auto"), cuda::ArchPath::kAmpere);
  EXPECT_EQ(cuda::choose_arch_path(8, 6, "A10", "auto"), cuda::ArchPath::kAmpere);
  EXPECT_EQ(cuda::choose_arch_path(8, 9, "L40S", "auto"), cuda::ArchPath::kAmpere);
  EXPECT_EQ(cuda::choose_arch_path(12, 0, "RTX 5090", "auto"), cuda::ArchPath::kAmpere);  // sm_80 PTX
  EXPECT_STREQ(cuda::arch_path_name(cuda::ArchPath::kHopper), "sm_90");
  EXPECT_STREQ(cuda::arch_path_name(cuda::ArchPath::kAmpere), "sm_80");
}

TEST(ArchPath, AmpereCanBeForcedOnHopperButNotTheReverse) {
  EXPECT_EQ(cuda::choose_arch_path(9, 0, "H200", "sm_80"), cuda::ArchPath::kAmpere);
  EXPECT_EQ(cuda::choose_arch_path(9, 0, "H200", "sm_90"), cuda::ArchPath::kHopper);
  try {
    cuda::choose_arch_path(8, 0, "NVIDIA A100-SXM4-80GB", "sm_90");
    FAIL() << "sm_90 on an Ampere GPU must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NVIDIA A100-SXM4-80GB has compute capability 8.0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cuda::choose_arch_path(9, 0, "H200", "sm_70"), Error);
}

TEST(ArchPath, BelowSm80IsAClearError) {
  try {
    cuda::choose_arch_path(7, 5, "Tesla T4", "auto");
    FAIL() << "sm_75 must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs compute capability 8.0 or newer, found 7.5 on Tesla T4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cuda::choose_arch_path(7, 0, "V100", "sm_80"), Error);  // forcing does not lift the floor
}

TEST(ArchPath, FlagWinsOverTheEnvironment) {
  ::setenv("DSINFER_CUDA_ARCH", "sm_80", 1);
  EXPECT_EQ(cuda::arch_request("auto"), "sm_80");
  EXPECT_EQ(cuda::arch_request(""), "sm_80");
  EXPECT_EQ(cuda::arch_request("sm_90"), "sm_90");
  ::unsetenv("DSINFER_CUDA_ARCH");
  EXPECT_EQ(cuda::arch_request("auto"), "auto");
  EXPECT_THROW(make_backend("cpu", "", "sm_75"), Error);  // the value is checked on every device
}

TEST(CudaOpRegistry, EveryBackendOpHasExactlyOneRow) {
  // The Backend's pure and fused virtual ops, read from backend.h.
  const std::string header = read_source("src/backend/backend.h");
  std::regex virt(R"(virtual\s+[^;{(]*?\b([a-z_0-9]+)\()");
  std::set<std::string> ops;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), virt); it != std::sregex_iterator(); ++it)
    ops.insert((*it)[1]);
  for (const char* not_op :
       {"name", "device", "kv_dtype", "prepare_weight", "prepare_named_weight", "prepare_weight_f32",
        "prepare_experts", "prepare_shared_experts", "prepare_table", "to_host", "begin_step", "end_step",
        "free_memory_bytes", "sample_wait"})
    ops.erase(not_op);
  ASSERT_GT(ops.size(), 25u);
  std::set<std::string> rows;
  for (const auto& row : cuda::cuda_op_support()) EXPECT_TRUE(rows.insert(row.op).second) << row.op;
  for (const std::string& op : ops)
    EXPECT_TRUE(rows.count(op)) << op << " has no row in cuda_op_registry.cpp";
  for (const std::string& row : rows) EXPECT_TRUE(ops.count(row)) << row << " is not a Backend op";
}

TEST(CudaOpRegistry, NamedKernelsAreDeclaredInTheCudaHeaders) {
  std::string headers;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(DSINFER_SOURCE_DIR) + "/src/backend/cuda"))
    if (entry.path().extension() == ".h")
      headers += read_source("src/backend/cuda/" + entry.path().filename().string());
  for (const auto& row : cuda::cuda_op_support()) {
    for (const auto* list : {&row.kernels, &row.hopper_kernels}) {
      for (const std::string& k : *list) {
        const std::string symbol = k.substr(0, k.find(' '));  // "linear_bf16 (cuBLASLt)" -> linear_bf16
        EXPECT_NE(headers.find(symbol + "("), std::string::npos)
            << row.op << ": kernel " << symbol << " not found";
      }
    }
    for (const std::string& part : row.composed_of) EXPECT_NO_THROW(cuda::cuda_op(part)) << row.op;
  }
}

TEST(CudaOpRegistry, ArchitectureCoverage) {
  EXPECT_TRUE(cuda::ops_without_cuda_kernel(Arch::kLlama).empty());
  EXPECT_TRUE(cuda::ops_without_cuda_kernel(Arch::kQwen2).empty());
  ModelConfig llama;
  llama.arch = Arch::kLlama;
  EXPECT_TRUE(cuda_runs(llama));
  EXPECT_EQ(cuda::cuda_op_coverage("rope_write_kv"), cuda::OpCoverage::kKernel);
  EXPECT_EQ(cuda::cuda_op_coverage("sample"), cuda::OpCoverage::kKernel);
  EXPECT_EQ(cuda::cuda_kernels_for("rope_write_kv", cuda::ArchPath::kHopper),
            std::vector<std::string>{"launch_rope_write_kv"});
  // Every op a DeepSeek model calls is in its list; each architecture's missing ops are a subset of them.
  for (Arch arch : {Arch::kDeepseekV2, Arch::kDeepseekV3, Arch::kDeepseekV32, Arch::kDeepseekV4}) {
    const auto& ops = cuda::model_backend_ops(arch);
    for (const std::string& op : cuda::ops_without_cuda_kernel(arch))
      EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end());
    ModelConfig c;
    c.arch = arch;
    EXPECT_EQ(cuda_runs(c), cuda::ops_without_cuda_kernel(arch).empty());
  }
  EXPECT_THROW(cuda::cuda_op("no_such_op"), Error);
}

TEST(CudaOpRegistry, CoverageFollowsEachRow) {
  // Every row: own kernels -> kKernel with exactly those kernels; no kernels and no parts -> kMissing or
  // kHostFallback, with no kernels listed.
  for (const auto& row : cuda::cuda_op_support()) {
    const cuda::OpCoverage c = cuda::cuda_op_coverage(row.op);
    if (!row.kernels.empty()) {
      EXPECT_EQ(c, cuda::OpCoverage::kKernel) << row.op;
      EXPECT_EQ(cuda::cuda_kernels_for(row.op, cuda::ArchPath::kAmpere), row.kernels) << row.op;
    } else if (row.composed_of.empty()) {
      EXPECT_EQ(c, row.host_fallback.empty() ? cuda::OpCoverage::kMissing : cuda::OpCoverage::kHostFallback);
      EXPECT_TRUE(cuda::cuda_kernels_for(row.op, cuda::ArchPath::kHopper).empty()) << row.op;
    }
  }
}

TEST(CudaOpRegistry, ModelOpListsMatchTheModelCode) {
  // Every b.<op>( call in an architecture's source files is in that architecture's list.
  const std::map<Arch, std::vector<std::string>> files = {
      {Arch::kLlama, {"llama.cpp"}},
      {Arch::kDeepseekV3, {"deepseek.cpp", "deepseek_moe.cpp"}},
      {Arch::kDeepseekV32, {"deepseek.cpp", "deepseek_moe.cpp", "deepseek_v32.cpp"}},
      {Arch::kDeepseekV4, {"deepseek_v4.cpp", "deepseek_v4_compressor.cpp"}}};
  std::regex call(R"(\bb\.([a-z_0-9]+)\()");
  for (const auto& [arch, names] : files) {
    const auto& ops = cuda::model_backend_ops(arch);
    for (const std::string& f : names) {
      const std::string src = read_source("src/model/arch/" + f);
      for (auto it = std::sregex_iterator(src.begin(), src.end(), call); it != std::sregex_iterator(); ++it) {
        const std::string op = (*it)[1];
        if (op == "to_host") continue;
        if (arch == Arch::kDeepseekV3 && f == "deepseek.cpp" && op == "attention_mla_sparse")
          continue;  // V3.2
        EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << f << " calls " << op;
      }
    }
  }
}

// A backend asked for activation parts the GEMV has no kernels for refuses to start (before it touches a
// GPU).
TEST(CudaDispatch, BackendRefusesActivationPartsOutsideZeroToTwo) {
  for (int parts : {-1, 3}) {
    CudaBackendOptions o;
    o.gemv_activation_parts = parts;
    EXPECT_THROW({ CudaBackend backend(o); }, Error) << parts;
  }
}

#else

TEST(CudaDispatch, NoCudaBuildRunsNothingOnTheGpu) {
  ModelConfig c;
  EXPECT_FALSE(cuda_runs(c));
}

#endif

// The dense decode GEMVs' activation parts: one for a dense model, two with split GEMMs or for a mixture of
// experts (routing follows the hidden state) or an unknown model's split setting; DSINFER_GEMV_ACT_PARTS
// overrides all of them and refuses anything but 1 or 2; DSINFER_CUDA_GEMM is bf16 or split.
TEST(CudaDispatch, GemvActivationPartsFollowTheModelAndTheEnvironment) {
  const char* saved = std::getenv("DSINFER_GEMV_ACT_PARTS");
  const std::string saved_value = saved ? saved : "";
  unsetenv("DSINFER_GEMV_ACT_PARTS");
  ModelConfig dense, moe;
  moe.n_routed_experts = 64;
  EXPECT_EQ(gemv_activation_parts_for(&dense, false), 1);
  EXPECT_EQ(gemv_activation_parts_for(&dense, true), 2);
  EXPECT_EQ(gemv_activation_parts_for(&moe, false), 2);
  EXPECT_EQ(gemv_activation_parts_for(nullptr, false), 1);
  EXPECT_EQ(gemv_activation_parts_for(nullptr, true), 2);
  setenv("DSINFER_GEMV_ACT_PARTS", "1", 1);
  EXPECT_EQ(gemv_activation_parts_for(&moe, true), 1);
  setenv("DSINFER_GEMV_ACT_PARTS", "2", 1);
  EXPECT_EQ(gemv_activation_parts_for(&dense, false), 2);
  setenv("DSINFER_GEMV_ACT_PARTS", "3", 1);
  EXPECT_THROW(gemv_activation_parts_for(&dense, false), Error);
  // DSINFER_CUDA_GEMM, the split setting the backend and `dsinfer check` read.
  const char* gemm = std::getenv("DSINFER_CUDA_GEMM");
  const std::string gemm_value = gemm ? gemm : "";
  unsetenv("DSINFER_CUDA_GEMM");
  EXPECT_FALSE(split_gemm_activations_from_env());
  setenv("DSINFER_CUDA_GEMM", "split", 1);
  EXPECT_TRUE(split_gemm_activations_from_env());
  setenv("DSINFER_CUDA_GEMM", "fp32", 1);
  EXPECT_THROW(split_gemm_activations_from_env(), Error);
  // Per model: split for the index-selecting V3.2 and V4 unless the environment says otherwise.
  ModelConfig v32, v4;
  v32.arch = Arch::kDeepseekV32;
  v4.arch = Arch::kDeepseekV4;
  unsetenv("DSINFER_CUDA_GEMM");
  EXPECT_TRUE(split_gemm_activations_for(&v32));
  EXPECT_TRUE(split_gemm_activations_for(&v4));
  EXPECT_FALSE(split_gemm_activations_for(&moe));
  EXPECT_FALSE(split_gemm_activations_for(nullptr));
  setenv("DSINFER_CUDA_GEMM", "bf16", 1);
  EXPECT_FALSE(split_gemm_activations_for(&v32));
  setenv("DSINFER_CUDA_GEMM", "split", 1);
  EXPECT_TRUE(split_gemm_activations_for(&dense));
  if (gemm)
    setenv("DSINFER_CUDA_GEMM", gemm_value.c_str(), 1);
  else
    unsetenv("DSINFER_CUDA_GEMM");
  if (saved)
    setenv("DSINFER_GEMV_ACT_PARTS", saved_value.c_str(), 1);
  else
    unsetenv("DSINFER_GEMV_ACT_PARTS");
}

}  // namespace
}  // namespace dsinfer
