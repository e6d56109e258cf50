// DSINFER_CUDA_SMEM_CARVEOUT's values (backend/cuda/smem_carveout.h): 100 when unset, no preference for
// "driver" or -1, a percentage as given, anything else an error naming the variable and the value.
#include "backend/cuda/smem_carveout.h"

#include <gtest/gtest.h>

#include <string>

namespace dsinfer::cuda {
namespace {

TEST(SmemCarveoutTest, UnsetAsksForTheMostSharedMemory) {
  EXPECT_EQ(kSmemCarveoutDefault, 100);
  EXPECT_EQ(parse_smem_carveout(nullptr), kSmemCarveoutDefault);
  EXPECT_EQ(parse_smem_carveout(""), kSmemCarveoutDefault);
}

TEST(SmemCarveoutTest, DriverLeavesTheChoiceToTheDriver) {
  EXPECT_EQ(parse_smem_carveout("driver"), kSmemCarveoutDriver);
  EXPECT_EQ(parse_smem_carveout("-1"), kSmemCarveoutDriver);
}

TEST(SmemCarveoutTest, PercentagesAreTakenAsGiven) {
  EXPECT_EQ(parse_smem_carveout("0"), 0);
  EXPECT_EQ(parse_smem_carveout("50"), 50);
  EXPECT_EQ(parse_smem_carveout("100"), 100);
}

TEST(SmemCarveoutTest, AnyOtherValueIsAnErrorNamingTheVariable) {
  for (const char* bad : {"101", "-2", "max", "50%", " 50", "1e2", "99999999999999999999"}) {
    try {
      parse_smem_carveout(bad);
      FAIL() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("DSINFER_CUDA_SMEM_CARVEOUT"), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("\"") + bad + "\""), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace dsinfer::cuda
