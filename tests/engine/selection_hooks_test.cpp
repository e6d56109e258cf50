// SelectionRecorder / SelectionForcer on the CPU reference: a run's own selections replayed on a second
// copy of the model give the same logits bit for bit and count no difference; a changed selection is
// counted and changes the logits (V3.2's lightning indexer and V4's CSA indexer). Models without an indexer
// refuse the hook.
#include "engine/selection_hooks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace dsinfer {
namespace {

class SelectionHooksTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Model> load(const std::string& name) {
    LoadOptions options;
    options.progress = false;
    return load_model(std::string(DSINFER_TEST_DATA) + "/models/" + name, cpu, options);
  }
  // Prompt logits [n, vocab] and the logits of 3 fed tokens after it, one forward pass each.
  std::vector<Tensor> run(Model& model) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(model.config().vocab_size) - 1);
    std::vector<int32_t> prompt(60);
    for (int32_t& t : prompt) t = token(rng);
    SequenceRunner runner(model, 128, 16);
    std::vector<Tensor> out = {runner.append(prompt, /*all_logits=*/true)};
    for (int32_t t : {5, 9, 7}) out.push_back(runner.append({t}));
    return out;
  }
  // run() on a fresh copy of the model with its selections recorded.
  std::vector<Tensor> run_recorded(SelectionRecorder& recorded) {
    auto tested = load(GetParam());
    ScopedSelectionHook hook(*tested, &recorded, "test");
    return run(*tested);
  }
  CpuBackend cpu;
};

INSTANTIATE_TEST_SUITE_P(Models, SelectionHooksTest,
                         ::testing::Values("tiny-deepseek-v32", "tiny-deepseek-v4"),
                         [](const auto& info) { return info.param == "tiny-deepseek-v32" ? "v32" : "v4"; });

TEST_P(SelectionHooksTest, OwnSelectionsReplayExactly) {
  auto reference = load(GetParam());
  SelectionRecorder recorded;
  const std::vector<Tensor> want = run_recorded(recorded);
  ASSERT_FALSE(recorded.calls.empty());
  SelectionForcer forcer(recorded.calls);
  ScopedSelectionHook hook(*reference, &forcer, "test");
  const std::vector<Tensor> got = run(*reference);
  EXPECT_TRUE(forcer.all_used());
  EXPECT_GT(forcer.rows, 0);
  EXPECT_GT(forcer.entries, 0);
  EXPECT_EQ(forcer.rows_differ, 0);
  EXPECT_EQ(forcer.entries_differ, 0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape());
    for (int64_t j = 0; j < got[i].numel(); ++j)
      ASSERT_EQ(got[i].f32()[j], want[i].f32()[j]) << i << " " << j;
  }
}

TEST_P(SelectionHooksTest, ChangedSelectionsAreCountedAndChangeTheLogits) {
  auto reference = load(GetParam());
  SelectionRecorder recorded;
  const std::vector<Tensor> want = run_recorded(recorded);
  // In the last indexed layer's calls (so no later selection sees a changed hidden state), in every row that
  // keeps rows and leaves some out, swap one kept row for one left out (-1 slots kept).
  const int64_t last = *std::max_element(recorded.layers.begin(), recorded.layers.end());
  int64_t swapped = 0;
  for (size_t c = 0; c < recorded.calls.size(); ++c) {
    if (recorded.layers[c] != last) continue;
    Tensor& call = recorded.calls[c];
    const int64_t T = call.dim(0), K = call.dim(1);
    for (int64_t t = 0; t < T; ++t) {
      int32_t* row = call.data<int32_t>() + t * K;
      int32_t top = -1;
      for (int64_t e = 0; e < K; ++e) top = std::max(top, row[e]);
      std::vector<bool> in(static_cast<size_t>(top + 1), false);
      for (int64_t e = 0; e < K; ++e)
        if (row[e] >= 0) in[static_cast<size_t>(row[e])] = true;
      for (int32_t r = 0; r < top; ++r) {
        if (!in[static_cast<size_t>(r)]) {
          row[0] = r;  // the first entry (a kept row) becomes a row the indexer left out
          ++swapped;
          break;
        }
      }
    }
  }
  ASSERT_GT(swapped, 0) << "no row left anything out: prompt too short for the test";
  SelectionForcer forcer(recorded.calls);
  ScopedSelectionHook hook(*reference, &forcer, "test");
  const std::vector<Tensor> got = run(*reference);
  EXPECT_TRUE(forcer.all_used());
  EXPECT_EQ(forcer.rows_differ, swapped);  // one swap in each changed row
  EXPECT_EQ(forcer.entries_differ, swapped);
  double diff = 0;
  for (size_t i = 0; i < got.size(); ++i)
    for (int64_t j = 0; j < got[i].numel(); ++j)
      diff = std::max<double>(diff, std::abs(got[i].f32()[j] - want[i].f32()[j]));
  EXPECT_GT(diff, 1e-4) << "the replayed selections did not reach the attention";
}

TEST(SelectionHooksRefusalTest, ModelsWithoutAnIndexerRefuseTheHook) {
  CpuBackend cpu;
  LoadOptions options;
  options.progress = false;
  auto model = load_model(std::string(DSINFER_TEST_DATA) + "/models/tiny-deepseek-v3", cpu, options);
  SelectionRecorder recorded;
  EXPECT_THROW(ScopedSelectionHook(*model, &recorded, "test"), Error);
}

}  // namespace
}  // namespace dsinfer
