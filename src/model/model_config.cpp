// Parsing of Hugging Face config.json into ModelConfig, with field-level validation.
#include "model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dsinfer {

using nlohmann::json;

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kDeepseekV2: return "deepseek_v2";
    case Arch::kDeepseekV3: return "deepseek_v3";
    case Arch::kDeepseekV32: return "deepseek_v32";
    case Arch::kDeepseekV4: return "deepseek_v4";
  }
  return "?";
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLlama3: return "llama3";
  }
  return "?";
}

namespace {

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

int64_t get_int(const json& j, const char* key, const char* where = "config.json") {
  DSI_CHECK(present(j, key), where, ": required field \"", key, "\" is missing");
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    DSI_CHECK(d == std::floor(d), where, ": field \"", key, "\" must be an integer, got ", v.dump());
    return static_cast<int64_t>(d);
  }
  fail(where, ": field \"", key, "\" must be an integer, got ", v.dump());
}

int64_t get_int_or(const json& j, const char* key, int64_t fallback, const char* where = "config.json") {
  return present(j, key) ? get_int(j, key, where) : fallback;
}

double get_num(const json& j, const char* key, const char* where = "config.json") {
  DSI_CHECK(present(j, key), where, ": required field \"", key, "\" is missing");
  const json& v = j.at(key);
  DSI_CHECK(v.is_number(), where, ": field \"", key, "\" must be a number, got ", v.dump());
  return v.get<double>();
}

double get_num_or(const json& j, const char* key, double fallback, const char* where = "config.json") {
  return present(j, key) ? get_num(j, key, where) : fallback;
}

bool get_bool_or(const json& j, const char* key, bool fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  DSI_CHECK(v.is_boolean(), "config.json: field \"", key, "\" must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string get_str_or(const json& j, const char* key, const std::string& fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  DSI_CHECK(v.is_string(), "config.json: field \"", key, "\" must be a string, got ", v.dump());
  return v.get<std::string>();
}

void require_positive(int64_t value, const char* key) {
  DSI_CHECK(value > 0, "config.json: field \"", key, "\" must be positive, got ", value);
}

Arch parse_arch(const json& j) {
  std::string type = get_str_or(j, "model_type", "");
  DSI_CHECK(!type.empty(), "config.json: required field \"model_type\" is missing");
  if (type == "llama") return Arch::kLlama;
  if (type == "qwen2") return Arch::kQwen2;
  if (type == "deepseek_v2") return Arch::kDeepseekV2;
  if (type == "deepseek_v3") return Arch::kDeepseekV3;
  if (type == "deepseek_v32") return Arch::kDeepseekV32;
  if (type == "deepseek_v4") return Arch::kDeepseekV4;
  fail("config.json: unsupported architecture model_type \"", type,
       "\" (supported: llama, qwen2, deepseek_v2, deepseek_v3, deepseek_v32, deepseek_v4)");
}

// Reads rope settings from either `rope_theta` + `rope_scaling` (Hub) or `rope_parameters` (newer transformers).
RopeConfig parse_rope(const json& j, int64_t max_positions) {
  RopeConfig rope;
  const json* params = nullptr;
  const char* where = "config.json rope_scaling";
  if (present(j, "rope_parameters")) {
    params = &j.at("rope_parameters");
    where = "config.json rope_parameters";
    DSI_CHECK(params->is_object(), "config.json: field \"rope_parameters\" must be an object");
    rope.theta = get_num_or(*params, "rope_theta", get_num_or(j, "rope_theta", 10000.0), where);
  } else {
    rope.theta = get_num_or(j, "rope_theta", 10000.0);
    if (present(j, "rope_scaling")) {
      params = &j.at("rope_scaling");
      DSI_CHECK(params->is_object(), "config.json: field \"rope_scaling\" must be an object or null");
    }
  }
  DSI_CHECK(rope.theta > 0, "config.json: field \"rope_theta\" must be positive");
  rope.original_max_position_embeddings = max_positions;
  if (!params) return rope;
  const json& p = *params;
  std::string type = p.contains("rope_type") && p["rope_type"].is_string() ? p["rope_type"].get<std::string>()
                     : p.contains("type") && p["type"].is_string()     ? p["type"].get<std::string>()
                                                                         : "default";
  rope.partial_rotary_factor = get_num_or(p, "partial_rotary_factor", 1.0, where);
  if (type == "default") {
    rope.type = RopeType::kDefault;
    return rope;
  }
  rope.original_max_position_embeddings =
      get_int_or(p, "original_max_position_embeddings", max_positions, where);
  if (type == "linear") {
    rope.type = RopeType::kLinear;
    rope.factor = get_num(p, "factor", where);
  } else if (type == "yarn") {
    rope.type = RopeType::kYarn;
    if (present(p, "factor")) {
      rope.factor = get_num(p, "factor", where);
    } else {
      DSI_CHECK(present(p, "original_max_position_embeddings"), where,
                ": yarn needs \"factor\" or \"original_max_position_embeddings\"");
      rope.factor = static_cast<double>(max_positions) / rope.original_max_position_embeddings;
    }
    // `or` semantics as in transformers: 0/null fall back to the defaults.
    rope.beta_fast = get_num_or(p, "beta_fast", 0.0, where);
    if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
    rope.beta_slow = get_num_or(p, "beta_slow", 0.0, where);
    if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
    rope.mscale = get_num_or(p, "mscale", 0.0, where);
    rope.mscale_all_dim = get_num_or(p, "mscale_all_dim", 0.0, where);
    if (present(p, "attention_factor")) rope.attention_factor = get_num(p, "attention_factor", where);
    rope.truncate = get_bool_or(p, "truncate", true);
  } else if (type == "llama3") {
    rope.type = RopeType::kLlama3;
    rope.factor = get_num(p, "factor", where);
    rope.low_freq_factor = get_num(p, "low_freq_factor", where);
    rope.high_freq_factor = get_num(p, "high_freq_factor", where);
    DSI_CHECK(present(p, "original_max_position_embeddings"), where,
              ": llama3 rope needs \"original_max_position_embeddings\"");
    DSI_CHECK(rope.high_freq_factor != rope.low_freq_factor, where,
              ": \"high_freq_factor\" must differ from \"low_freq_factor\"");
  } else {
    fail(where, ": unsupported rope type \"", type, "\" (supported: default, linear, yarn, llama3)");
  }
  DSI_CHECK(rope.factor > 0, where, ": field \"factor\" must be positive");
  DSI_CHECK(rope.original_max_position_embeddings > 0, where,
            ": field \"original_max_position_embeddings\" must be positive");
  return rope;
}

std::vector<int32_t> parse_token_ids(const json& j, const char* key) {
  std::vector<int32_t> ids;
  if (!present(j, key)) return ids;
  const json& v = j.at(key);
  if (v.is_number_integer()) {
    ids.push_back(v.get<int32_t>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      DSI_CHECK(e.is_number_integer(), "config.json: field \"", key, "\" must hold integers");
      ids.push_back(e.get<int32_t>());
    }
  } else {
    fail("config.json: field \"", key, "\" must be an integer or a list of integers");
  }
  return ids;
}

void parse_quantization(const json& j, ModelConfig& c) {
  if (!present(j, "quantization_config")) return;
  const json& q = j.at("quantization_config");
  DSI_CHECK(q.is_object(), "config.json: field \"quantization_config\" must be an object");
  std::string method = get_str_or(q, "quant_method", "");
  DSI_CHECK(method == "fp8", "config.json: quantization_config.quant_method \"", method,
            "\" is not supported (supported: fp8)");
  std::string fmt = get_str_or(q, "fmt", "e4m3");
  DSI_CHECK(fmt == "e4m3", "config.json: quantization_config.fmt \"", fmt, "\" is not supported (e4m3 only)");
  c.quant.fp8_block = true;
  if (present(q, "weight_block_size")) {
    const json& b = q.at("weight_block_size");
    DSI_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer(),
              "config.json: quantization_config.weight_block_size must be [rows, cols]");
    c.quant.block_n = b[0].get<int64_t>();
    c.quant.block_k = b[1].get<int64_t>();
    DSI_CHECK(c.quant.block_n > 0 && c.quant.block_k > 0,
              "config.json: quantization_config.weight_block_size must be positive");
  }
  c.quant.scale_fmt = q.contains("scale_fmt") && q["scale_fmt"].is_string() ? q["scale_fmt"].get<std::string>() : "";
}

void parse_mla_and_moe(const json& j, ModelConfig& c) {
  c.q_lora_rank = get_int_or(j, "q_lora_rank", 0);
  c.kv_lora_rank = get_int(j, "kv_lora_rank");
  c.qk_nope_head_dim = get_int(j, "qk_nope_head_dim");
  c.qk_rope_head_dim = get_int(j, "qk_rope_head_dim");
  c.v_head_dim = get_int(j, "v_head_dim");
  require_positive(c.kv_lora_rank, "kv_lora_rank");
  require_positive(c.qk_nope_head_dim, "qk_nope_head_dim");
  require_positive(c.qk_rope_head_dim, "qk_rope_head_dim");
  require_positive(c.v_head_dim, "v_head_dim");
  DSI_CHECK(c.q_lora_rank >= 0, "config.json: field \"q_lora_rank\" must be null or positive");
  DSI_CHECK(c.qk_rope_head_dim % 2 == 0, "config.json: field \"qk_rope_head_dim\" must be even, got ",
            c.qk_rope_head_dim);
  if (present(j, "qk_head_dim")) {
    DSI_CHECK(get_int(j, "qk_head_dim") == c.qk_head_dim(), "config.json: field \"qk_head_dim\" (",
              get_int(j, "qk_head_dim"), ") is not qk_nope_head_dim + qk_rope_head_dim (", c.qk_head_dim(), ")");
  }
  // transformers treats the rope part as the rotary head_dim of DeepSeek models.
  c.head_dim = c.qk_rope_head_dim;
  // V3 configs default to interleaved rope; V2 always uses the complex (interleaved-pair) form.
  c.rope_interleave = get_bool_or(j, "rope_interleave", true);

  c.n_routed_experts = get_int_or(j, "n_routed_experts", 0);
  if (c.n_routed_experts == 0) return;
  c.n_shared_experts = get_int_or(j, "n_shared_experts", 0);
  c.num_experts_per_tok = get_int(j, "num_experts_per_tok");
  c.moe_intermediate_size = get_int(j, "moe_intermediate_size");
  c.first_k_dense_replace = get_int_or(j, "first_k_dense_replace", 0);
  c.moe_layer_freq = get_int_or(j, "moe_layer_freq", 1);
  c.n_group = get_int_or(j, "n_group", 1);
  c.topk_group = get_int_or(j, "topk_group", 1);
  c.norm_topk_prob = get_bool_or(j, "norm_topk_prob", false);
  c.routed_scaling_factor = get_num_or(j, "routed_scaling_factor", 1.0);
  bool v3 = c.arch != Arch::kDeepseekV2;
  c.topk_method = get_str_or(j, "topk_method", v3 ? "noaux_tc" : "greedy");
  c.scoring_func = get_str_or(j, "scoring_func", v3 ? "sigmoid" : "softmax");
  require_positive(c.num_experts_per_tok, "num_experts_per_tok");
  require_positive(c.moe_intermediate_size, "moe_intermediate_size");
  require_positive(c.moe_layer_freq, "moe_layer_freq");
  require_positive(c.n_group, "n_group");
  require_positive(c.topk_group, "topk_group");
  DSI_CHECK(c.n_shared_experts >= 0, "config.json: field \"n_shared_experts\" must not be negative");
  DSI_CHECK(c.num_experts_per_tok <= c.n_routed_experts, "config.json: num_experts_per_tok (",
            c.num_experts_per_tok, ") exceeds n_routed_experts (", c.n_routed_experts, ")");
  DSI_CHECK(c.n_routed_experts % c.n_group == 0, "config.json: n_routed_experts (", c.n_routed_experts,
            ") is not divisible by n_group (", c.n_group, ")");
  DSI_CHECK(c.topk_group <= c.n_group, "config.json: topk_group (", c.topk_group, ") exceeds n_group (",
            c.n_group, ")");
  DSI_CHECK(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.num_layers,
            "config.json: field \"first_k_dense_replace\" must be within [0, num_hidden_layers]");
  if (c.topk_method == "noaux_tc") {
    DSI_CHECK(c.scoring_func == "sigmoid", "config.json: topk_method noaux_tc needs scoring_func sigmoid, got \"",
              c.scoring_func, "\"");
    DSI_CHECK(c.n_routed_experts / c.n_group >= 2 || c.n_group == 1,
              "config.json: noaux_tc group scoring needs at least 2 experts per group");
  } else if (c.topk_method == "greedy" || c.topk_method == "group_limited_greedy") {
    DSI_CHECK(c.scoring_func == "softmax", "config.json: topk_method ", c.topk_method,
              " needs scoring_func softmax, got \"", c.scoring_func, "\"");
  } else {
    fail("config.json: unsupported topk_method \"", c.topk_method,
         "\" (supported: greedy, group_limited_greedy, noaux_tc)");
  }
  if (c.topk_method != "greedy") {
    DSI_CHECK(c.num_experts_per_tok <= c.topk_group * (c.n_routed_experts / c.n_group),
              "config.json: num_experts_per_tok (", c.num_experts_per_tok,
              ") exceeds the experts in topk_group groups");
  }
}

// DeepSeek-V3.2's indexer (DeepseekV32Config defaults: 64 heads of 128, top 2048).
void parse_indexer(const json& j, ModelConfig& c) {
  c.index_n_heads = get_int_or(j, "index_n_heads", 64);
  c.index_head_dim = get_int_or(j, "index_head_dim", 128);
  c.index_topk = get_int_or(j, "index_topk", 2048);
  require_positive(c.index_n_heads, "index_n_heads");
  require_positive(c.index_head_dim, "index_head_dim");
  require_positive(c.index_topk, "index_topk");
  DSI_CHECK(c.q_lora_rank > 0, "config.json: deepseek_v32 needs q_lora_rank (its indexer reads q_lora)");
  DSI_CHECK(c.index_head_dim >= c.qk_rope_head_dim, "config.json: index_head_dim (", c.index_head_dim,
            ") is smaller than qk_rope_head_dim (", c.qk_rope_head_dim, ")");
}

}  // namespace

ModelConfig parse_model_config(const json& j) {
  DSI_CHECK(j.is_object(), "config.json: top level must be a JSON object");
  ModelConfig c;
  c.raw = j;
  c.arch = parse_arch(j);
  c.model_type = arch_name(c.arch);
  c.vocab_size = get_int(j, "vocab_size");
  c.hidden_size = get_int(j, "hidden_size");
  c.num_layers = get_int(j, "num_hidden_layers");
  c.num_heads = get_int(j, "num_attention_heads");
  c.num_kv_heads = get_int_or(j, "num_key_value_heads", c.num_heads);
  c.max_position_embeddings = get_int_or(j, "max_position_embeddings", 4096);
  c.rms_norm_eps = get_num_or(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = get_bool_or(j, "tie_word_embeddings", false);
  require_positive(c.vocab_size, "vocab_size");
  require_positive(c.hidden_size, "hidden_size");
  require_positive(c.num_layers, "num_hidden_layers");
  require_positive(c.num_heads, "num_attention_heads");
  require_positive(c.num_kv_heads, "num_key_value_heads");
  require_positive(c.max_position_embeddings, "max_position_embeddings");
  DSI_CHECK(c.rms_norm_eps > 0, "config.json: field \"rms_norm_eps\" must be positive");
  std::string act = get_str_or(j, "hidden_act", "silu");
  DSI_CHECK(act == "silu", "config.json: hidden_act \"", act, "\" is not supported (silu only)");
  c.rope = parse_rope(j, c.max_position_embeddings);
  c.bos_token_id = present(j, "bos_token_id") ? std::optional<int32_t>(get_int(j, "bos_token_id")) : std::nullopt;
  c.eos_token_ids = parse_token_ids(j, "eos_token_id");
  c.num_nextn_predict_layers = get_int_or(j, "num_nextn_predict_layers", 0);
  parse_quantization(j, c);

  if (c.arch == Arch::kDeepseekV4) {
    // DeepSeek-V4 specific fields are read by its model (model/arch/deepseek_v4*).
    return c;
  }
  if (c.arch != Arch::kDeepseekV4) {
    c.intermediate_size = get_int(j, "intermediate_size");
    require_positive(c.intermediate_size, "intermediate_size");
  }
  if (c.arch == Arch::kLlama || c.arch == Arch::kQwen2) {
    c.head_dim = get_int_or(j, "head_dim", 0);
    if (c.head_dim == 0) {
      DSI_CHECK(c.hidden_size % c.num_heads == 0, "config.json: hidden_size (", c.hidden_size,
                ") is not divisible by num_attention_heads (", c.num_heads, ") and head_dim is not given");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    DSI_CHECK(c.head_dim % 2 == 0, "config.json: field \"head_dim\" must be even, got ", c.head_dim);
    DSI_CHECK(c.num_heads % c.num_kv_heads == 0, "config.json: num_attention_heads (", c.num_heads,
              ") is not a multiple of num_key_value_heads (", c.num_kv_heads, ")");
    bool attention_bias = get_bool_or(j, "attention_bias", false);
    c.qkv_bias = c.arch == Arch::kQwen2 ? true : attention_bias;
    c.o_bias = c.arch == Arch::kQwen2 ? false : attention_bias;
    c.mlp_bias = get_bool_or(j, "mlp_bias", false);
    DSI_CHECK(!(c.arch == Arch::kQwen2 && get_bool_or(j, "use_sliding_window", false)),
              "config.json: use_sliding_window is not supported for qwen2");
  } else {
    parse_mla_and_moe(j, c);
    if (c.arch == Arch::kDeepseekV32) parse_indexer(j, c);
    DSI_CHECK(!get_bool_or(j, "attention_bias", false),
              "config.json: attention_bias true is not supported for DeepSeek MLA");
  }
  DSI_CHECK(c.rope.partial_rotary_factor == 1.0,
            "config.json: partial_rotary_factor other than 1 is not supported for ", c.model_type);
  return c;
}

ModelConfig load_model_config(const std::string& dir) {
  // A path to the config file itself is accepted too.
  std::string path = std::filesystem::is_regular_file(dir) ? dir : dir + "/config.json";
  std::ifstream in(path);
  DSI_CHECK(in.good(), "cannot open ", path, ": no such file or not readable");
  std::stringstream buffer;
  buffer << in.rdbuf();
  json j;
  try {
    j = json::parse(buffer.str());
  } catch (const json::parse_error& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  try {
    return parse_model_config(j);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

}  // namespace dsinfer
