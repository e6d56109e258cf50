// Golden evaluation: logits error metrics and greedy continuation agreement.
#include "engine/golden_eval.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/sequence_runner.h"
#include "model/safetensors.h"

namespace dsinfer {

namespace {

std::vector<int32_t> read_ids(const SafetensorsFile& file, const std::string& name) {
  Tensor t = file.get(name);
  std::vector<int32_t> ids(t.numel());
  if (t.dtype() == DType::I32) {
    std::copy(t.data<int32_t>(), t.data<int32_t>() + t.numel(), ids.begin());
  } else if (t.dtype() == DType::I64) {
    for (int64_t i = 0; i < t.numel(); ++i) ids[i] = static_cast<int32_t>(t.data<int64_t>()[i]);
  } else {
    fail(file.path(), ": tensor \"", name, "\" must be I32 or I64");
  }
  return ids;
}

// Cases in a golden file: its "cases" metadata, else the run of input_ids.N present.
int case_count(const SafetensorsFile& golden, const std::string& golden_path) {
  int cases = 0;
  auto meta = golden.metadata().find("cases");
  if (meta != golden.metadata().end()) {
    try {
      cases = std::stoi(meta->second);
    } catch (const std::exception&) {
      fail(golden_path, ": metadata \"cases\" is not a number");
    }
  } else {
    while (golden.contains("input_ids." + std::to_string(cases))) ++cases;
  }
  DSI_CHECK(cases > 0, golden_path, ": no golden cases (input_ids.0 missing)");
  return cases;
}

}  // namespace

nlohmann::json GoldenReport::to_json() const {
  nlohmann::json j;
  j["pass"] = pass;
  j["tolerance"] = tolerance;
  j["margin_rule"] = margin_rule;
  j["routing_rule"] = routing_rule;
  j["cases"] = nlohmann::json::array();
  for (const GoldenCase& c : cases) {
    nlohmann::json cj = {{"case", c.index},
                         {"tokens", c.tokens},
                         {"max_abs_err", c.max_abs_err},
                         {"rel_l2_err", c.rel_l2_err},
                         {"greedy_match", c.greedy_match},
                         {"excused_mismatch", c.excused_mismatch ? c.mismatch.to_json() : nlohmann::json()},
                         {"excused_routing", c.excused_routing},
                         {"pass", c.pass}};
    if (!c.greedy_match) {
      cj["greedy"] = c.greedy;
      cj["expected_greedy"] = c.expected_greedy;
      cj["first_mismatch"] = c.first_mismatch;
      cj["mismatch_top2_margin"] = c.mismatch_margin;
      cj["mismatch"] = c.mismatch.to_json();
    }
    if (c.routing_checked) cj.update(c.routing.to_json());
    j["cases"].push_back(cj);
  }
  return j;
}

double rel_l2_error(const float* ours, const float* ref, int64_t n, double* max_abs) {
  double diff2 = 0.0, ref2 = 0.0, worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(ours[i]) - ref[i];
    worst = std::max(worst, std::abs(d));
    diff2 += d * d;
    ref2 += static_cast<double>(ref[i]) * ref[i];
  }
  if (max_abs) *max_abs = worst;
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

std::vector<std::vector<int32_t>> golden_prompts(const std::string& golden_path) {
  SafetensorsFile golden(golden_path);
  const int cases = case_count(golden, golden_path);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < cases; ++i) prompts.push_back(read_ids(golden, "input_ids." + std::to_string(i)));
  return prompts;
}

GoldenReport run_golden(Model& model, const std::string& golden_path, const GoldenOptions& options) {
  SafetensorsFile golden(golden_path);
  const int cases = case_count(golden, golden_path);
  const int64_t V = model.config().vocab_size;
  GoldenReport report;
  report.tolerance = options.rel_l2_tolerance;
  report.margin_rule = options.margin_rule;
  const bool routing_rule = options.routing_rule && has_discrete_choices(model);  // dense models: never
  report.routing_rule = routing_rule;
  report.pass = true;
  for (int i = 0; i < cases; ++i) {
    const std::string n = std::to_string(i);
    std::vector<int32_t> ids = read_ids(golden, "input_ids." + n);
    Tensor ref = golden.get("logits." + n).to_f32();  // [kept, V]
    DSI_CHECK(ref.ndim() == 2 && ref.dim(1) == V, golden_path, ": logits.", n, " has shape ",
              shape_str(ref.shape()), ", expected [*, ", V, "]");
    int64_t start = 0;
    if (golden.contains("logits_start." + n)) start = read_ids(golden, "logits_start." + n).at(0);
    DSI_CHECK(start + ref.dim(0) == static_cast<int64_t>(ids.size()), golden_path, ": logits.", n,
              " rows do not match input_ids.", n);
    std::vector<int32_t> expected = read_ids(golden, "greedy." + n);

    SequenceRunner runner(model, static_cast<int64_t>(ids.size() + expected.size() + 1));
    Tensor logits = runner.append(ids, /*all_logits=*/true, options.prefill_chunk);  // [tokens, V]
    GoldenCase c;
    c.index = i;
    c.tokens = static_cast<int64_t>(ids.size());
    c.rel_l2_err = rel_l2_error(logits.f32() + start * V, ref.f32(), ref.numel(), &c.max_abs_err);
    // Greedy continuation from the prompt, token by token through the cache. The reference's logits are
    // known at step 0 only (the prompt's last row); later steps judge a mismatch by our own gap.
    const float* last = logits.f32() + (logits.dim(0) - 1) * V;
    const float* ref_last = ref.f32() + (ref.dim(0) - 1) * V;
    c.expected_greedy = expected;
    for (size_t g = 0; g < expected.size(); ++g) {
      const int32_t next = argmax_first(last, V);
      c.greedy.push_back(next);
      if (next != expected[g]) {
        c.first_mismatch = static_cast<int>(g);
        c.mismatch_margin = top2_margin(last, V);
        c.mismatch = judge_mismatch(static_cast<int>(g), last, g == 0 ? ref_last : nullptr, V, next,
                                    expected[g], c.max_abs_err, options.margin_rule);
        c.excused_mismatch = c.mismatch.excused;
        break;  // the continuations differ from here on: nothing after the first mismatch is compared
      }
      if (g + 1 < expected.size()) {
        logits = runner.append({next});
        last = logits.f32();
      }
    }
    c.greedy_match = c.first_mismatch < 0;
    c.pass = (c.greedy_match || c.excused_mismatch) && c.rel_l2_err <= options.rel_l2_tolerance &&
             std::isfinite(c.rel_l2_err);
    if (!c.pass && routing_rule) {
      DSI_CHECK(options.routing_reference, "golden: the routing rule needs the CPU reference model");
      RoutingRuleOptions ro;
      ro.rel_l2_tolerance = options.rel_l2_tolerance;
      ro.margin_rule = options.margin_rule;
      ro.prefill_chunk = options.prefill_chunk;
      c.routing =
          judge_routing(model, options.routing_reference(), ids, static_cast<int64_t>(expected.size()), ro);
      c.routing_checked = true;
      c.excused_routing = c.routing.excused;
      c.pass = c.excused_routing;
    }
    report.pass = report.pass && c.pass;
    report.cases.push_back(std::move(c));
  }
  return report;
}

}  // namespace dsinfer
