// The start-up step profile's error text: out-of-memory failures say the model does not fit, every other
// failure keeps its own message (a bad environment setting once read as "the model does not fit").
#include <gtest/gtest.h>

#include <new>
#include <string>

#include "core/error.h"
#include "engine/memory_plan.h"
#include "resilience/step_error.h"

namespace dsinfer {
namespace {

TEST(StepProfileErrorTest, OutOfMemorySaysTheModelDoesNotFit) {
  const Error cuda_oom("cudaMalloc: out of memory");
  const std::string m = step_profile_error(cuda_oom, 2048);
  EXPECT_NE(m.find("the model does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("max_num_tokens = 2048"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaMalloc: out of memory"), std::string::npos) << m;
  EXPECT_NE(m.find("lower max_num_tokens"), std::string::npos) << m;

  const std::string b = step_profile_error(std::bad_alloc(), 512);
  EXPECT_NE(b.find("the model does not fit"), std::string::npos) << b;
  const std::string f = step_profile_error(StepFault(StepErrorType::kOutOfMemory, "injected"), 64);
  EXPECT_NE(f.find("the model does not fit"), std::string::npos) << f;
}

TEST(StepProfileErrorTest, OtherFailuresKeepTheirOwnMessage) {
  const Error setting("DSINFER_MLA_KERNEL: \"v9\" is not one of v1, v2, v2x2");
  const std::string m = step_profile_error(setting, 2048);
  EXPECT_EQ(m.find("does not fit"), std::string::npos) << m;
  EXPECT_EQ(m.find("lower max_num_tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("DSINFER_MLA_KERNEL: \"v9\" is not one of v1, v2, v2x2"), std::string::npos) << m;
  EXPECT_NE(m.find("max_num_tokens = 2048"), std::string::npos) << m;

  const std::string k = step_profile_error(Error("CUDA error: an illegal memory access was encountered"), 8);
  EXPECT_EQ(k.find("does not fit"), std::string::npos) << k;
  EXPECT_NE(k.find("illegal memory access"), std::string::npos) << k;
}

}  // namespace
}  // namespace dsinfer
