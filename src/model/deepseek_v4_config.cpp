// DeepSeek-V4 config.json parsing (both spellings) with field-level validation, and the size report.
#include "model/deepseek_v4_config.h"

#include <cmath>

#include "core/error.h"
#include "model/json_fields.h"

namespace dsinfer {

using nlohmann::json;

const char* v4_attn_kind_name(V4AttnKind kind) {
  switch (kind) {
    case V4AttnKind::kSliding:
      return "sliding_attention";
    case V4AttnKind::kCsa:
      return "compressed_sparse_attention";
    case V4AttnKind::kHca:
      return "heavily_compressed_attention";
  }
  return "?";
}

int64_t DeepseekV4Config::num_hash_layers() const {
  int64_t n = 0;
  for (bool h : hash_layers) n += h ? 1 : 0;
  return n;
}

namespace {

using namespace json_fields;

constexpr const char* kWhere = "config.json (deepseek_v4)";

// One rope parameter set (a rope_scaling object or a rope_parameters entry). `theta` is used when the
// object carries no rope_theta. Only default and yarn occur in V4 checkpoints.
RopeConfig parse_rope_object(const json& p, double theta, int64_t max_positions, const std::string& where) {
  DSI_CHECK(p.is_object(), where, " must be an object");
  RopeConfig rope;
  rope.theta = get_num_or(p, "rope_theta", theta, where);
  DSI_CHECK(rope.theta > 0, where, ": rope_theta must be positive");
  std::string type = "default";
  if (present(p, "rope_type"))
    type = p.at("rope_type").get<std::string>();
  else if (present(p, "type"))
    type = p.at("type").get<std::string>();
  rope.original_max_position_embeddings = max_positions;
  if (type == "default") return rope;
  DSI_CHECK(type == "yarn", where, ": rope type \"", type,
            "\" is not supported for deepseek_v4 (default, yarn)");
  rope.type = RopeType::kYarn;
  rope.original_max_position_embeddings = get_int(p, "original_max_position_embeddings", where);
  // transformers >= 5: an explicit factor wins; without one it is max_position / original.
  rope.factor = present(p, "factor")
                    ? get_num(p, "factor", where)
                    : static_cast<double>(max_positions) / rope.original_max_position_embeddings;
  rope.beta_fast = get_num_or(p, "beta_fast", 0.0, where);
  if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
  rope.beta_slow = get_num_or(p, "beta_slow", 0.0, where);
  if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
  rope.mscale = get_num_or(p, "mscale", 0.0, where);
  rope.mscale_all_dim = get_num_or(p, "mscale_all_dim", 0.0, where);
  // V4 never scales cos/sin by YaRN's mscale (transformers forces attention_factor 1.0 for the compress
  // rope).
  rope.attention_factor = get_num_or(p, "attention_factor", 1.0, where);
  if (present(p, "truncate")) rope.truncate = p.at("truncate").get<bool>();
  DSI_CHECK(rope.factor > 0 && rope.original_max_position_embeddings > 0, where,
            ": yarn factor and original_max_position_embeddings must be positive");
  return rope;
}

void parse_layer_kinds(const json& j, DeepseekV4Config& c) {
  const int64_t n = c.num_layers;
  if (present(j, "layer_types")) {
    const json& types = j.at("layer_types");
    DSI_CHECK(types.is_array() && static_cast<int64_t>(types.size()) >= n, kWhere,
              ": field \"layer_types\" must list at least num_hidden_layers (", n, ") entries");
    int64_t csa = 4, hca = 128;
    if (present(j, "compress_rates")) {
      const json& rates = j.at("compress_rates");
      DSI_CHECK(rates.is_object(), kWhere, ": field \"compress_rates\" must be an object");
      csa = get_int_or(rates, "compressed_sparse_attention", csa);
      hca = get_int_or(rates, "heavily_compressed_attention", hca);
    }
    csa = get_int_or(j, "compress_rate_csa", csa);
    hca = get_int_or(j, "compress_rate_hca", hca);
    DSI_CHECK(csa > 0 && hca > 0, kWhere, ": compress rates must be positive");
    for (int64_t i = 0; i < static_cast<int64_t>(types.size()); ++i) {
      DSI_CHECK(types[i].is_string(), kWhere, ": layer_types[", i, "] must be a string");
      const std::string t = types[i].get<std::string>();
      V4AttnKind kind = V4AttnKind::kSliding;
      int64_t ratio = 0;
      if (t == "compressed_sparse_attention") {
        kind = V4AttnKind::kCsa;
        ratio = csa;
      } else if (t == "heavily_compressed_attention") {
        kind = V4AttnKind::kHca;
        ratio = hca;
      } else if (t != "sliding_attention") {
        fail(kWhere, ": layer_types[", i, "] \"", t,
             "\" is not one of sliding_attention, compressed_sparse_attention, heavily_compressed_attention");
      }
      if (i < n) {
        c.attn_kinds.push_back(kind);
        c.compress_ratios.push_back(ratio);
      } else {
        c.mtp_compress_ratios.push_back(ratio);
      }
    }
    return;
  }
  DSI_CHECK(present(j, "compress_ratios"), kWhere,
            ": required field \"compress_ratios\" (or transformers' \"layer_types\") is missing");
  const json& ratios = j.at("compress_ratios");
  DSI_CHECK(ratios.is_array() && static_cast<int64_t>(ratios.size()) >= n, kWhere,
            ": field \"compress_ratios\" must list at least num_hidden_layers (", n, ") entries, got ",
            ratios.is_array() ? ratios.size() : 0);
  for (int64_t i = 0; i < static_cast<int64_t>(ratios.size()); ++i) {
    DSI_CHECK(ratios[i].is_number_integer() && ratios[i].get<int64_t>() >= 0, kWhere, ": compress_ratios[", i,
              "] must be a non-negative integer, got ", ratios[i].dump());
    const int64_t r = ratios[i].get<int64_t>();
    // DeepSeek's inference code: ratio 4 uses overlapping windows and the indexer; any other ratio pools all.
    const V4AttnKind kind = r == 0 ? V4AttnKind::kSliding : r == 4 ? V4AttnKind::kCsa : V4AttnKind::kHca;
    if (i < n) {
      c.attn_kinds.push_back(kind);
      c.compress_ratios.push_back(r);
    } else {
      c.mtp_compress_ratios.push_back(r);
    }
  }
}

void parse_hash_layers(const json& j, DeepseekV4Config& c) {
  const int64_t n = c.num_layers;
  if (present(j, "mlp_layer_types")) {
    const json& types = j.at("mlp_layer_types");
    DSI_CHECK(types.is_array() && static_cast<int64_t>(types.size()) >= n, kWhere,
              ": field \"mlp_layer_types\" must list num_hidden_layers (", n, ") entries");
    for (int64_t i = 0; i < n; ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
      DSI_CHECK(t == "hash_moe" || t == "moe", kWhere, ": mlp_layer_types[", i,
                "] must be \"hash_moe\" or \"moe\"");
      c.hash_layers.push_back(t == "hash_moe");
    }
    return;
  }
  DSI_CHECK(present(j, "num_hash_layers"), kWhere,
            ": required field \"num_hash_layers\" (or transformers' \"mlp_layer_types\") is missing");
  const int64_t h = get_int(j, "num_hash_layers");
  DSI_CHECK(h >= 0 && h <= n, kWhere, ": num_hash_layers (", h, ") must be within [0, num_hidden_layers]");
  for (int64_t i = 0; i < n; ++i) c.hash_layers.push_back(i < h);
}

void parse_ropes(const json& j, DeepseekV4Config& c) {
  const double rope_theta = get_num_or(j, "rope_theta", 10000.0);
  const double compress_theta = get_num_or(j, "compress_rope_theta", 160000.0);
  const int64_t maxpos = c.max_position_embeddings;
  if (present(j, "rope_parameters")) {
    const json& rp = j.at("rope_parameters");
    DSI_CHECK(rp.is_object(), kWhere, ": field \"rope_parameters\" must be an object");
    if (rp.contains("main") && rp.contains("compress")) {
      c.main_rope = parse_rope_object(rp.at("main"), rope_theta, maxpos, "config.json rope_parameters.main");
      c.compress_rope = parse_rope_object(rp.at("compress"), compress_theta, maxpos,
                                          "config.json rope_parameters.compress");
      return;
    }
    json scaled = rp;
    scaled["rope_theta"] = compress_theta;
    c.main_rope.theta = rope_theta;
    c.compress_rope = parse_rope_object(scaled, compress_theta, maxpos, "config.json rope_parameters");
    return;
  }
  c.main_rope.theta = rope_theta;
  c.main_rope.original_max_position_embeddings = maxpos;
  if (present(j, "rope_scaling")) {
    json scaled = j.at("rope_scaling");
    DSI_CHECK(scaled.is_object(), kWhere, ": field \"rope_scaling\" must be an object or null");
    scaled["rope_theta"] = compress_theta;
    c.compress_rope = parse_rope_object(scaled, compress_theta, maxpos, "config.json rope_scaling");
  } else {
    c.compress_rope.theta = compress_theta;
    c.compress_rope.original_max_position_embeddings = maxpos;
  }
}

}  // namespace

DeepseekV4Config parse_deepseek_v4_config(const json& j) {
  DSI_CHECK(j.is_object(), kWhere, ": top level must be a JSON object");
  DeepseekV4Config c;
  c.vocab_size = get_int(j, "vocab_size");
  c.hidden_size = get_int(j, "hidden_size");
  c.num_layers = get_int(j, "num_hidden_layers");
  c.num_heads = get_int(j, "num_attention_heads");
  c.head_dim = get_int(j, "head_dim");
  c.q_lora_rank = get_int(j, "q_lora_rank");
  c.o_groups = get_int(j, "o_groups");
  c.o_lora_rank = get_int(j, "o_lora_rank");
  c.sliding_window = get_int(j, "sliding_window");
  c.max_position_embeddings = get_int_or(j, "max_position_embeddings", 4096);
  c.rms_norm_eps = get_num_or(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = get_bool_or(j, "tie_word_embeddings", false);
  for (const char* key :
       {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "q_lora_rank",
        "o_groups", "o_lora_rank", "sliding_window", "max_position_embeddings"}) {
    require_positive(get_int_or(j, key, 1), key);
  }
  DSI_CHECK(get_int_or(j, "num_key_value_heads", 1) == 1, kWhere,
            ": num_key_value_heads must be 1 (V4 shares one KV head), got ",
            get_int(j, "num_key_value_heads"));
  if (present(j, "qk_rope_head_dim")) {
    c.rope_dim = get_int(j, "qk_rope_head_dim");
  } else {
    DSI_CHECK(
        present(j, "partial_rotary_factor"), kWhere,
        ": required field \"qk_rope_head_dim\" (or transformers' \"partial_rotary_factor\") is missing");
    c.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * get_num(j, "partial_rotary_factor"));
  }
  DSI_CHECK(c.rope_dim > 0 && c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim, kWhere, ": qk_rope_head_dim (",
            c.rope_dim, ") must be positive, even and at most head_dim (", c.head_dim, ")");
  DSI_CHECK((c.num_heads * c.head_dim) % c.o_groups == 0, kWhere, ": num_attention_heads * head_dim (",
            c.num_heads * c.head_dim, ") is not divisible by o_groups (", c.o_groups, ")");

  parse_layer_kinds(j, c);
  parse_ropes(j, c);

  bool any_csa = false;
  for (V4AttnKind k : c.attn_kinds) any_csa = any_csa || k == V4AttnKind::kCsa;
  c.index_n_heads = get_int_or(j, "index_n_heads", 0);
  c.index_head_dim = get_int_or(j, "index_head_dim", 0);
  c.index_topk = get_int_or(j, "index_topk", 0);
  if (any_csa) {
    require_positive(c.index_n_heads, "index_n_heads");
    require_positive(c.index_head_dim, "index_head_dim");
    require_positive(c.index_topk, "index_topk");
    DSI_CHECK(c.rope_dim <= c.index_head_dim, kWhere, ": qk_rope_head_dim (", c.rope_dim,
              ") exceeds index_head_dim (", c.index_head_dim, ")");
  }

  c.hc_mult = get_int(j, "hc_mult");
  c.hc_sinkhorn_iters = get_int(j, "hc_sinkhorn_iters");
  c.hc_eps = get_num(j, "hc_eps");
  require_positive(c.hc_mult, "hc_mult");
  require_positive(c.hc_sinkhorn_iters, "hc_sinkhorn_iters");
  DSI_CHECK(c.hc_eps >= 0, kWhere, ": hc_eps must not be negative");

  c.n_routed_experts = get_int(j, "n_routed_experts");
  c.n_shared_experts = get_int_or(j, "n_shared_experts", 0);
  c.num_experts_per_tok = get_int(j, "num_experts_per_tok");
  c.moe_intermediate_size = get_int(j, "moe_intermediate_size");
  require_positive(c.n_routed_experts, "n_routed_experts");
  require_positive(c.num_experts_per_tok, "num_experts_per_tok");
  require_positive(c.moe_intermediate_size, "moe_intermediate_size");
  DSI_CHECK(c.n_shared_experts >= 0, kWhere, ": n_shared_experts must not be negative");
  DSI_CHECK(c.num_experts_per_tok <= c.n_routed_experts, kWhere, ": num_experts_per_tok (",
            c.num_experts_per_tok, ") exceeds n_routed_experts (", c.n_routed_experts, ")");
  parse_hash_layers(j, c);
  c.scoring_func = get_str_or(j, "scoring_func", "sqrtsoftplus");
  DSI_CHECK(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "sigmoid" || c.scoring_func == "softmax",
            kWhere, ": scoring_func \"", c.scoring_func,
            "\" is not supported (sqrtsoftplus, sigmoid, softmax)");
  c.routed_scaling_factor = get_num_or(j, "routed_scaling_factor", 1.0);
  c.swiglu_limit = get_num_or(j, "swiglu_limit", 0.0);
  DSI_CHECK(c.swiglu_limit >= 0, kWhere, ": swiglu_limit must not be negative");
  const std::string act = get_str_or(j, "hidden_act", "silu");
  DSI_CHECK(act == "silu", kWhere, ": hidden_act \"", act, "\" is not supported (silu only)");

  c.num_nextn_predict_layers = get_int_or(j, "num_nextn_predict_layers", 0);
  c.expert_dtype = get_str_or(j, "expert_dtype", "");
  DSI_CHECK(c.expert_dtype.empty() || c.expert_dtype == "fp4" || c.expert_dtype == "fp8", kWhere,
            ": expert_dtype \"", c.expert_dtype, "\" is not supported (fp4, fp8)");
  if (present(j, "quantization_config")) {
    const json& q = j.at("quantization_config");
    DSI_CHECK(q.is_object() && q.value("quant_method", "") == "fp8", kWhere,
              ": quantization_config must be quant_method fp8");
    c.fp8_weights = true;
  }
  return c;
}

namespace {

// Parameter and published-format byte counts of one kind of tensor.
struct Counter {
  int64_t params = 0;
  int64_t bytes = 0;
  void bf16(int64_t n) { params += n, bytes += 2 * n; }
  void f32(int64_t n) { params += n, bytes += 4 * n; }
  // An FP8 E4M3 matrix with one e8m0 scale per 128x128 block (bf16 when the checkpoint is not quantized).
  void fp8(int64_t rows, int64_t cols, bool quantized) {
    if (!quantized) return bf16(rows * cols);
    params += rows * cols;
    bytes += rows * cols + ((rows + 127) / 128) * ((cols + 127) / 128);
  }
  // FP4 E2M1, two per byte, one e8m0 scale per 32 inputs.
  void fp4(int64_t rows, int64_t cols) {
    params += rows * cols;
    bytes += rows * cols / 2 + rows * ((cols + 31) / 32);
  }
};

struct LayerCount {
  Counter all;     // every weight
  Counter active;  // per token
};

void count_expert(Counter& c, const DeepseekV4Config& cfg, int64_t inter, bool routed) {
  const int64_t H = cfg.hidden_size;
  for (int m = 0; m < 3; ++m) {
    const int64_t rows = m == 1 ? H : inter, cols = m == 1 ? inter : H;
    // Routed experts ship as FP4 in the published quantized checkpoints (V4-Flash declares expert_dtype
    // "fp4"; configs that leave it out but are FP8-quantized are counted the same way).
    const bool fp4 = cfg.expert_dtype == "fp4" || (cfg.expert_dtype.empty() && cfg.fp8_weights);
    if (routed && fp4) {
      c.fp4(rows, cols);
    } else {
      c.fp8(rows, cols, cfg.fp8_weights);
    }
  }
}

LayerCount count_layer(const DeepseekV4Config& c, int64_t ratio, V4AttnKind kind, bool hash) {
  Counter shared;
  const int64_t H = c.hidden_size, D = c.head_dim, hc = c.hc_mult, q8 = c.fp8_weights;
  shared.bf16(2 * H);                                                                  // attn_norm, ffn_norm
  for (int i = 0; i < 2; ++i) shared.f32((2 + hc) * hc * hc * H + (2 + hc) * hc + 3);  // hc_attn, hc_ffn
  shared.fp8(c.q_lora_rank, H, q8);
  shared.bf16(c.q_lora_rank);
  shared.fp8(c.num_heads * D, c.q_lora_rank, q8);
  shared.fp8(D, H, q8);
  shared.bf16(D);
  shared.fp8(c.o_groups * c.o_lora_rank, c.num_heads * D / c.o_groups, q8);
  shared.fp8(H, c.o_groups * c.o_lora_rank, q8);
  shared.f32(c.num_heads);
  if (kind != V4AttnKind::kSliding) {
    const int64_t coff = kind == V4AttnKind::kCsa ? 2 : 1;
    shared.bf16(2 * coff * D * H);
    shared.f32(ratio * coff * D);
    shared.bf16(D);
  }
  if (kind == V4AttnKind::kCsa) {
    const int64_t ihd = c.index_head_dim;
    shared.fp8(c.index_n_heads * ihd, c.q_lora_rank, q8);
    shared.bf16(c.index_n_heads * H);
    shared.bf16(2 * 2 * ihd * H);
    shared.f32(ratio * 2 * ihd);
    shared.bf16(ihd);
  }
  shared.bf16(c.n_routed_experts * H);  // router
  if (hash) {
    shared.bytes += 8 * c.vocab_size * c.num_experts_per_tok;  // tid2eid int64 (a table, not parameters)
  } else {
    shared.f32(c.n_routed_experts);  // selection bias
  }
  for (int64_t s = 0; s < c.n_shared_experts; ++s) count_expert(shared, c, c.moe_intermediate_size, false);
  Counter one;
  count_expert(one, c, c.moe_intermediate_size, true);
  LayerCount out;
  out.all = shared;
  out.all.params += one.params * c.n_routed_experts;
  out.all.bytes += one.bytes * c.n_routed_experts;
  out.active = shared;
  out.active.params += one.params * c.num_experts_per_tok;
  out.active.bytes += one.bytes * c.num_experts_per_tok;
  return out;
}

}  // namespace

DeepseekV4SizeReport deepseek_v4_size_report(const DeepseekV4Config& c) {
  DeepseekV4SizeReport r;
  const int64_t H = c.hidden_size, hc = c.hc_mult;
  Counter top;
  top.bf16(c.vocab_size * H);                              // embed
  if (!c.tie_word_embeddings) top.bf16(c.vocab_size * H);  // head
  top.bf16(H);                                             // norm
  top.f32(hc * hc * H + hc + 1);                           // hc_head
  r.total_params = top.params;
  r.active_params = top.params;
  r.weight_bytes = top.bytes;
  double kv_values_per_token = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerCount l = count_layer(c, c.compress_ratios[i], c.attn_kinds[i], c.hash_layers[i]);
    r.total_params += l.all.params;
    r.active_params += l.active.params;
    r.weight_bytes += l.all.bytes;
    const int64_t ratio = c.compress_ratios[i];
    r.kv_window_bytes_fp32 += 4 * c.sliding_window * c.head_dim;
    if (ratio > 0) {
      const int64_t coff = c.coff(i);
      kv_values_per_token += static_cast<double>(c.head_dim) / ratio;
      r.kv_window_bytes_fp32 += 4 * coff * ratio * 2 * coff * c.head_dim;
      if (c.attn_kinds[i] == V4AttnKind::kCsa) {
        kv_values_per_token += static_cast<double>(c.index_head_dim) / ratio;
        r.kv_window_bytes_fp32 += 4 * 2 * ratio * 2 * 2 * c.index_head_dim;
      }
    }
  }
  r.active_params_no_embed = r.active_params - c.vocab_size * H * (c.tie_word_embeddings ? 1 : 2);
  // MTP: one decoder layer each (routed by bias), plus enorm/hnorm, e_proj/h_proj, its norm and hc_head.
  r.weight_bytes_with_mtp = r.weight_bytes;
  for (int64_t m = 0; m < c.num_nextn_predict_layers; ++m) {
    const int64_t ratio =
        m < static_cast<int64_t>(c.mtp_compress_ratios.size()) ? c.mtp_compress_ratios[m] : 0;
    const V4AttnKind kind = ratio == 0   ? V4AttnKind::kSliding
                            : ratio == 4 ? V4AttnKind::kCsa
                                         : V4AttnKind::kHca;
    LayerCount l = count_layer(c, ratio, kind, false);
    Counter extra;
    extra.bf16(3 * H);
    extra.fp8(H, H, c.fp8_weights);
    extra.fp8(H, H, c.fp8_weights);
    extra.f32(hc * hc * H + hc + 1);
    r.mtp_params += l.all.params + extra.params;
    r.weight_bytes_with_mtp += l.all.bytes + extra.bytes;
  }
  r.kv_bytes_per_token_bf16 = 2 * kv_values_per_token;
  r.kv_bytes_per_token_fp32 = 4 * kv_values_per_token;
  return r;
}

}  // namespace dsinfer
