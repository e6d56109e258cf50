// RoutingRecorder / RoutingForcer on the CPU reference of the MoE models whose routing the evaluation tools
// replay (DeepSeek-V3's MoE blocks, DeepSeek-V4's learned-routing layers): a run's own routing replayed on a
// second copy gives the same logits bit for bit with no flip; a changed decision is counted, judged by the
// reference's scores and changes the logits. V4's hash-routed layers are not shown (their experts follow the
// token id). Models without MoE routing refuse the hook.
#include "engine/routing_hooks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../fixture_models.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/routing_rule.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace dsinfer {
namespace {

class RoutingHooksTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Prompt logits [n, vocab] and the logits of 3 fed tokens after it, one forward pass each.
  std::vector<Tensor> run(Model& model) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(model.config().vocab_size) - 1);
    std::vector<int32_t> prompt(40);
    for (int32_t& t : prompt) t = token(rng);
    SequenceRunner runner(model, 64, 16);
    std::vector<Tensor> out = {runner.append(prompt, /*all_logits=*/true)};
    for (int32_t t : {5, 9, 7}) out.push_back(runner.append({t}).clone());
    return out;
  }
  std::vector<Tensor> run_recorded(RoutingRecorder& recorded) {
    auto tested = load_fixture_model(GetParam(), cpu);
    ScopedRoutingHook hook(*tested, &recorded, "test");
    return run(*tested);
  }
  CpuBackend cpu;
};

INSTANTIATE_TEST_SUITE_P(Models, RoutingHooksTest, ::testing::Values("tiny-deepseek-v3", "tiny-deepseek-v4"),
                         [](const auto& info) { return info.param == "tiny-deepseek-v3" ? "v3" : "v4"; });

TEST_P(RoutingHooksTest, OwnRoutingReplaysExactly) {
  auto reference = load_fixture_model(GetParam(), cpu);
  EXPECT_TRUE(has_moe_routing(*reference));
  RoutingRecorder recorded;
  const std::vector<Tensor> want = run_recorded(recorded);
  ASSERT_FALSE(recorded.calls.empty());
  RoutingForcer forcer(recorded.calls);
  ScopedRoutingHook hook(*reference, &forcer, "test");
  const std::vector<Tensor> got = run(*reference);
  EXPECT_TRUE(forcer.all_used());
  EXPECT_GT(forcer.decisions, 0);
  EXPECT_EQ(forcer.flipped, 0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape());
    for (int64_t j = 0; j < got[i].numel(); ++j)
      ASSERT_EQ(got[i].f32()[j], want[i].f32()[j]) << i << " " << j;
  }
}

TEST_P(RoutingHooksTest, ChangedDecisionIsCountedJudgedAndChangesTheLogits) {
  auto reference = load_fixture_model(GetParam(), cpu);
  RoutingRecorder recorded;
  const std::vector<Tensor> want = run_recorded(recorded);
  // The prompt pass's last routed layer (so no later decision sees a changed hidden state): token 3 takes
  // an expert it did not choose, from the group of the one it gives up (an expert-level flip).
  const int64_t E = reference->config().raw.value("n_routed_experts", int64_t{0});
  ASSERT_GT(E, 0);
  size_t last = 0;
  while (last + 1 < recorded.calls.size() && recorded.calls[last + 1].first.dim(0) == want[0].dim(0)) ++last;
  Tensor& ids = recorded.calls[last].first;  // [T, k]
  const int64_t k = ids.dim(1);
  int32_t* row = ids.data<int32_t>() + 3 * k;
  const int64_t per = E / std::max<int64_t>(1, reference->config().n_group);  // experts per group
  int32_t other = -1;
  for (int64_t j = 0; j < k && other < 0; ++j) {
    for (int32_t e = static_cast<int32_t>(row[j] / per * per); e < (row[j] / per + 1) * per; ++e) {
      if (std::find(row, row + k, e) == row + k) {
        other = e;
        row[j] = e;
        break;
      }
    }
  }
  ASSERT_GE(other, 0);
  RoutingForcer forcer(recorded.calls);
  ScopedRoutingHook hook(*reference, &forcer, "test");
  const std::vector<Tensor> got = run(*reference);
  EXPECT_TRUE(forcer.all_used());
  EXPECT_EQ(forcer.flipped, 1);
  ASSERT_EQ(forcer.flips.size(), 1u);
  EXPECT_EQ(forcer.flips[0].token, 3);
  EXPECT_EQ(forcer.flips[0].in, std::vector<int32_t>{other});
  EXPECT_EQ(forcer.flips[0].level, "expert");  // judged with the reference's own scores
  EXPECT_TRUE(std::isfinite(forcer.flips[0].margin));
  double diff = 0;
  for (size_t i = 0; i < got.size(); ++i)
    for (int64_t j = 0; j < got[i].numel(); ++j)
      diff = std::max<double>(diff, std::abs(got[i].f32()[j] - want[i].f32()[j]));
  EXPECT_GT(diff, 1e-4) << "the replayed routing did not reach the experts";
}

TEST(RoutingHooksV4Test, HashLayersAreNotShown) {
  CpuBackend cpu;
  auto model = load_fixture_model("tiny-deepseek-v4", cpu);
  const int64_t hash_layers = model->config().raw.value("num_hash_layers", int64_t{0});
  ASSERT_GT(hash_layers, 0);
  struct Layers : MoeRoutingHook {
    void on_route(Backend&, int64_t layer, Tensor&, Tensor&) override { seen.push_back(layer); }
    std::vector<int64_t> seen;
  } layers;
  ScopedRoutingHook hook(*model, &layers, "test");
  SequenceRunner runner(*model, 8);
  runner.append({3, 4, 5});
  const int64_t L = model->config().num_layers;
  std::vector<int64_t> want;
  for (int64_t i = hash_layers; i < L; ++i) want.push_back(i);
  EXPECT_EQ(layers.seen, want);
}

TEST(RoutingHooksRefusalTest, ModelsWithoutMoeRoutingRefuseTheHook) {
  CpuBackend cpu;
  auto model = load_fixture_model("tiny-llama", cpu);
  RoutingRecorder recorded;
  EXPECT_FALSE(has_moe_routing(*model));
  EXPECT_THROW(ScopedRoutingHook(*model, &recorded, "test"), Error);
}

}  // namespace
}  // namespace dsinfer
