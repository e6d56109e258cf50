// YAML readers of the resilience sections. Every reader marks its section as given (a circuit_breaker or
// fault_injection section switches that feature on) and names the key and the bad value in its errors.
#include "resilience/resilience_yaml.h"

#include "core/error.h"

namespace dsinfer {

namespace {

std::string scalar_text(const YAML::Node& node, const std::string& where) {
  DSI_CHECK(node.IsScalar(), where, " must be a scalar");
  return node.Scalar();
}

template <typename T>
T number(const YAML::Node& node, const std::string& where) {
  const std::string text = scalar_text(node, where);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    if constexpr (std::is_same_v<T, bool>) fail(where, " must be true or false, got \"", text, "\"");
    if constexpr (std::is_integral_v<T>) fail(where, " must be an integer, got \"", text, "\"");
    fail(where, " must be a number, got \"", text, "\"");
  }
}

// A duration: "10s", "500ms"; a bare integer counts as milliseconds only for keys named *_ms.
int64_t duration(const YAML::Node& node, const std::string& where, bool bare_is_ms) {
  const std::string text = scalar_text(node, where);
  if (bare_is_ms && !text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return number<int64_t>(node, where);
  }
  return parse_duration_ms(text, where);
}

std::map<std::string, std::string> string_map(const YAML::Node& node, const std::string& where) {
  std::map<std::string, std::string> out;
  if (node.IsNull()) return out;
  DSI_CHECK(node.IsMap(), where, " must be a mapping");
  for (const auto& kv : node)
    out[kv.first.as<std::string>()] = scalar_text(kv.second, where + "." + kv.first.as<std::string>());
  return out;
}

FallbackStrategy fallback(const YAML::Node& node, const std::string& where) {
  DSI_CHECK(node.IsMap(), where, " must be a mapping with type and params");
  FallbackStrategy f;
  for (const auto& kv : node) {
    const std::string k = kv.first.as<std::string>();
    if (k == "type") {
      f.type = scalar_text(kv.second, where + ".type");
    } else if (k == "params") {
      f.params = string_map(kv.second, where + ".params");
    } else {
      fail(where, ": unknown key \"", k, "\" (known: type, params)");
    }
  }
  DSI_CHECK(!f.type.empty(), where, ": type is required (reduce_batch_size or switch_precision)");
  for (const auto& [k, v] : f.params) {
    const std::string pw = where + ".params." + k;
    YAML::Node value(v);
    if (k == "min_batch") f.min_batch = number<int32_t>(value, pw);
    if (k == "step") f.step = number<int32_t>(value, pw);
    if (k == "target") f.target = v;
  }
  return f;
}

MetricsRule metrics_rule(const YAML::Node& node, const std::string& where) {
  DSI_CHECK(node.IsMap(), where, " must be a mapping with metric, condition and action");
  MetricsRule r;
  for (const auto& kv : node) {
    const std::string k = kv.first.as<std::string>();
    if (k == "metric") {
      r.metric = scalar_text(kv.second, where + ".metric");
    } else if (k == "condition") {
      r.condition = scalar_text(kv.second, where + ".condition");
    } else if (k == "action") {
      r.action = scalar_text(kv.second, where + ".action");
    } else {
      fail(where, ": unknown key \"", k, "\" (known: metric, condition, action)");
    }
  }
  DSI_CHECK(!r.metric.empty() && !r.condition.empty() && !r.action.empty(), where,
            ": metric, condition and action are all required");
  parse_condition(r.condition, where + ".condition", &r);
  return r;
}

template <typename F>
ResilienceKeyReader cb(F f) {
  return [f](const YAML::Node& n, const std::string& where, ResilienceConfig& c) {
    c.circuit_breaker.enabled = true;
    f(n, where, c.circuit_breaker);
  };
}
template <typename F>
ResilienceKeyReader wd(F f) {
  return [f](const YAML::Node& n, const std::string& where, ResilienceConfig& c) { f(n, where, c.watchdog); };
}
template <typename F>
ResilienceKeyReader lt(F f) {
  return [f](const YAML::Node& n, const std::string& where, ResilienceConfig& c) {
    f(n, where, c.length_tiers);
  };
}
template <typename F>
ResilienceKeyReader fi(F f) {
  return [f](const YAML::Node& n, const std::string& where, ResilienceConfig& c) {
    c.fault_injection.enabled = true;
    f(n, where, c.fault_injection);
  };
}

using Node = YAML::Node;
using W = const std::string&;

}  // namespace

const std::map<std::string, ResilienceSection>& resilience_sections() {
  static const std::map<std::string, ResilienceSection> table = {
      {"circuit_breaker",
       {
           {"max_latency_ms",
            cb([](const Node& n, W w, CircuitBreakerConfig& c) { c.max_latency_ms = duration(n, w, true); })},
           {"sliding_window", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              c.sliding_window_ms = duration(n, w, false);
            })},
           {"error_threshold", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              parse_rate(scalar_text(n, w), w, &c.error_threshold, &c.error_window_ms);
            })},
           {"error_types", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              DSI_CHECK(n.IsSequence(), w, " must be a list, e.g. [CUDA_ERROR, TIMEOUT]");
              c.error_types.clear();
              for (size_t i = 0; i < n.size(); ++i) {
                const std::string name = scalar_text(n[i], w);
                try {
                  c.error_types.push_back(parse_step_error_type(name));
                } catch (const Error& e) {
                  fail(w, ": ", e.what());
                }
              }
            })},
           {"fallback_strategies", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              DSI_CHECK(n.IsSequence(), w, " must be a list of {type, params}");
              c.fallback_strategies.clear();
              for (size_t i = 0; i < n.size(); ++i)
                c.fallback_strategies.push_back(fallback(n[i], str_cat(w, "[", i, "]")));
            })},
           {"metrics_rules", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              DSI_CHECK(n.IsSequence(), w, " must be a list of {metric, condition, action}");
              c.metrics_rules.clear();
              for (size_t i = 0; i < n.size(); ++i)
                c.metrics_rules.push_back(metrics_rule(n[i], str_cat(w, "[", i, "]")));
            })},
           {"cooldown",
            cb([](const Node& n, W w, CircuitBreakerConfig& c) { c.cooldown_ms = duration(n, w, false); })},
           {"half_open_probes", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              c.half_open_probes = number<int32_t>(n, w);
            })},
           {"recovery_interval", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              c.recovery_interval_ms = duration(n, w, false);
            })},
           {"min_latency_samples", cb([](const Node& n, W w, CircuitBreakerConfig& c) {
              c.min_latency_samples = number<int32_t>(n, w);
            })},
       }},
      {"watchdog",
       {
           {"step_timeout",
            wd([](const Node& n, W w, WatchdogConfig& c) { c.step_timeout_ms = duration(n, w, false); })},
           {"hang_timeout",
            wd([](const Node& n, W w, WatchdogConfig& c) { c.hang_timeout_ms = duration(n, w, false); })},
           {"request_timeout",
            wd([](const Node& n, W w, WatchdogConfig& c) { c.request_timeout_ms = duration(n, w, false); })},
           {"max_step_retries",
            wd([](const Node& n, W w, WatchdogConfig& c) { c.max_step_retries = number<int32_t>(n, w); })},
       }},
      {"length_tiers",
       {
           {"enabled", lt([](const Node& n, W w, LengthTiersConfig& c) { c.enabled = number<bool>(n, w); })},
           {"long_prompt_tokens", lt([](const Node& n, W w, LengthTiersConfig& c) {
              c.long_prompt_tokens = number<int32_t>(n, w);
            })},
           {"long_prefill_share", lt([](const Node& n, W w, LengthTiersConfig& c) {
              c.long_prefill_share = number<double>(n, w);
            })},
       }},
      {"fault_injection",
       {
           {"step_error_rate", fi([](const Node& n, W w, FaultInjectionConfig& c) {
              c.step_error_rate = number<double>(n, w);
            })},
           {"step_delay_ms",
            fi([](const Node& n, W w, FaultInjectionConfig& c) { c.step_delay_ms = number<int64_t>(n, w); })},
           {"fail_after_steps", fi([](const Node& n, W w, FaultInjectionConfig& c) {
              c.fail_after_steps = number<int64_t>(n, w);
            })},
           {"fail_steps",
            fi([](const Node& n, W w, FaultInjectionConfig& c) { c.fail_steps = number<int64_t>(n, w); })},
           {"alloc_failure_rate", fi([](const Node& n, W w, FaultInjectionConfig& c) {
              c.alloc_failure_rate = number<double>(n, w);
            })},
           {"sticky_error_after_steps", fi([](const Node& n, W w, FaultInjectionConfig& c) {
              c.sticky_error_after_steps = number<int64_t>(n, w);
            })},
           {"seed", fi([](const Node& n, W w, FaultInjectionConfig& c) { c.seed = number<uint64_t>(n, w); })},
       }},
  };
  return table;
}

}  // namespace dsinfer
