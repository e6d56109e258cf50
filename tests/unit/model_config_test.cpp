// Tests for parse_model_config: the four supported architectures, both rope spellings and every rope type,
// the fp8 quantization_config, and the errors for missing, mistyped and inconsistent fields.
#include "model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace dsinfer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json llama_json() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1,
    "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 160,
    "max_position_embeddings": 256, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": null, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false, "vocab_size": 300})");
}

json qwen2_json() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 0, "eos_token_id": [1, 2], "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 256, "model_type": "qwen2",
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": true,
    "use_sliding_window": false, "vocab_size": 300})");
}

json deepseek_v2_json() {
  return json::parse(R"({
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1,
    "first_k_dense_replace": 1, "head_dim": 8, "hidden_act": "silu", "hidden_size": 64,
    "intermediate_size": 96, "kv_lora_rank": 32, "max_position_embeddings": 256, "model_type": "deepseek_v2",
    "moe_intermediate_size": 24, "n_group": null, "n_routed_experts": 6, "n_shared_experts": 2,
    "norm_topk_prob": false, "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 3,
    "num_key_value_heads": 4, "q_lora_rank": null, "qk_head_dim": 24, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 32, "type": "yarn"},
    "rope_theta": 10000.0, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "topk_group": null,
    "topk_method": "greedy", "v_head_dim": 16, "vocab_size": 320})");
}

json deepseek_v3_json() {
  return json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "ep_size": 1, "bos_token_id": 0, "eos_token_id": 1,
    "first_k_dense_replace": 1, "head_dim": 8, "hidden_act": "silu", "hidden_size": 64,
    "intermediate_size": 128, "kv_lora_rank": 32, "max_position_embeddings": 256, "model_type": "deepseek_v3",
    "moe_intermediate_size": 32, "moe_layer_freq": 1, "n_group": 4, "n_routed_experts": 8,
    "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 4, "num_experts_per_tok": 3,
    "num_hidden_layers": 3, "num_key_value_heads": 4, "num_nextn_predict_layers": 1, "q_lora_rank": 48,
    "qk_head_dim": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06,
    "rope_interleave": true,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 64, "type": "yarn"},
    "rope_theta": 10000.0, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_group": 2,
    "topk_method": "noaux_tc", "v_head_dim": 24, "vocab_size": 384})");
}

// `"name"` as the error messages spell a field (built with += to avoid a GCC 12 -Wrestrict false positive).
std::string quoted(const char* name) {
  std::string out = "\"";
  out += name;
  out += '"';
  return out;
}

// Parses `j` expecting a dsinfer::Error whose message contains every one of `parts`.
void expect_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    parse_model_config(j);
    ADD_FAILURE() << "expected dsinfer::Error for " << j.dump();
  } catch (const Error& e) {
    for (const std::string& part : parts) EXPECT_THAT(e.what(), HasSubstr(part)) << j.dump();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected dsinfer::Error, got another exception: " << e.what();
  }
}

TEST(ModelConfigTest, Llama) {
  ModelConfig c = parse_model_config(llama_json());
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.quant.fp8_block);
  ASSERT_TRUE(c.bos_token_id.has_value());
  EXPECT_EQ(*c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{1});
  EXPECT_EQ(c.n_routed_experts, 0);
  EXPECT_FALSE(c.is_deepseek_mla());
  EXPECT_FALSE(c.is_moe_layer(1));
}

TEST(ModelConfigTest, LlamaDefaultsAndBiases) {
  json j = llama_json();
  j.erase("head_dim");
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j.erase("bos_token_id");
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.head_dim, 16);     // hidden_size / num_attention_heads
  EXPECT_EQ(c.num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_TRUE(c.mlp_bias);
}

TEST(ModelConfigTest, Qwen2) {
  ModelConfig c = parse_model_config(qwen2_json());
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.qkv_bias);  // qwen2 always has q/k/v biases
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{1, 2}));
}

TEST(ModelConfigTest, Qwen2SlidingWindowIsRejected) {
  json j = qwen2_json();
  j["use_sliding_window"] = true;
  expect_error(j, {"use_sliding_window"});
}

TEST(ModelConfigTest, DeepseekV2) {
  ModelConfig c = parse_model_config(deepseek_v2_json());
  EXPECT_EQ(c.arch, Arch::kDeepseekV2);
  EXPECT_TRUE(c.is_deepseek_mla());
  EXPECT_EQ(c.q_lora_rank, 0);  // null: no query compression
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_head_dim, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.qk_head_dim(), 24);
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_routed_experts, 6);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 24);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.n_group, 1);     // null
  EXPECT_EQ(c.topk_group, 1);  // null
  EXPECT_EQ(c.topk_method, "greedy");
  EXPECT_EQ(c.scoring_func, "softmax");
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(2));
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
}

TEST(ModelConfigTest, DeepseekV2DefaultsMethodAndScoring) {
  json j = deepseek_v2_json();
  j.erase("topk_method");
  j.erase("scoring_func");
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.topk_method, "greedy");
  EXPECT_EQ(c.scoring_func, "softmax");
}

TEST(ModelConfigTest, DeepseekV2GroupLimitedGreedy) {
  json j = deepseek_v2_json();
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 3;
  j["topk_group"] = 2;
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.topk_method, "group_limited_greedy");
  EXPECT_EQ(c.n_group, 3);
  EXPECT_EQ(c.topk_group, 2);
}

TEST(ModelConfigTest, DeepseekV3) {
  ModelConfig c = parse_model_config(deepseek_v3_json());
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.v_head_dim, 24);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.num_experts_per_tok, 3);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.scoring_func, "sigmoid");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.raw.at("ep_size").get<int>(), 1) << "raw json keeps every field";
}

TEST(ModelConfigTest, DeepseekV3DefaultsAndMoeLayerFreq) {
  json j = deepseek_v3_json();
  j.erase("topk_method");
  j.erase("scoring_func");
  j.erase("rope_interleave");
  j["moe_layer_freq"] = 2;
  j["first_k_dense_replace"] = 0;
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.scoring_func, "sigmoid");
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(2));
}

TEST(ModelConfigTest, DeepseekV3Dense) {
  json j = deepseek_v3_json();
  j.erase("n_routed_experts");
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.n_routed_experts, 0);
  EXPECT_FALSE(c.is_moe_layer(2));
}

TEST(ModelConfigTest, Fp8QuantizationConfig) {
  json j = deepseek_v3_json();
  j["quantization_config"] = json::parse(
      R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 64]})");
  ModelConfig c = parse_model_config(j);
  EXPECT_TRUE(c.quant.fp8_block);
  EXPECT_EQ(c.quant.block_n, 128);
  EXPECT_EQ(c.quant.block_k, 64);
  EXPECT_EQ(c.quant.scale_fmt, "");

  j["quantization_config"]["scale_fmt"] = "ue8m0";
  j["quantization_config"].erase("weight_block_size");
  c = parse_model_config(j);
  EXPECT_EQ(c.quant.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quant.block_n, 128);
  EXPECT_EQ(c.quant.block_k, 128);
}

TEST(ModelConfigTest, QuantizationConfigErrors) {
  json j = deepseek_v3_json();
  j["quantization_config"] = {{"quant_method", "awq"}};
  expect_error(j, {"quant_method", "awq"});
  j["quantization_config"] = {{"quant_method", 8}};
  expect_error(j, {"quant_method"});
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}};
  expect_error(j, {"fmt", "e5m2"});
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", 3}};
  expect_error(j, {"fmt"});
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128}}};
  expect_error(j, {"weight_block_size"});
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 0}}};
  expect_error(j, {"weight_block_size"});
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {"128", 128}}};
  expect_error(j, {"weight_block_size"});
  j["quantization_config"] = "fp8";
  expect_error(j, {"quantization_config"});
}

// ---------------------------------------------------------------------------------------------------------
// Rope spellings and types.

TEST(ModelConfigRopeTest, ScalingTypeAndRopeTypeSpellings) {
  for (const char* key : {"type", "rope_type"}) {
    json j = llama_json();
    j["rope_scaling"] = {{key, "linear"}, {"factor", 2.5}};
    ModelConfig c = parse_model_config(j);
    EXPECT_EQ(c.rope.type, RopeType::kLinear) << key;
    EXPECT_DOUBLE_EQ(c.rope.factor, 2.5) << key;
    EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0) << key;
  }
}

TEST(ModelConfigRopeTest, RopeParametersForm) {
  json j = llama_json();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);

  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  c = parse_model_config(j);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);

  // rope_theta may stay at the top level next to rope_parameters.
  j["rope_theta"] = 123.0;
  j["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope.theta, 123.0);
  // rope_parameters wins over rope_scaling.
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_model_config(j).rope.type, RopeType::kDefault);
}

TEST(ModelConfigRopeTest, DefaultTypeExplicit) {
  json j = llama_json();
  j["rope_scaling"] = {{"rope_type", "default"}};
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 256);
}

TEST(ModelConfigRopeTest, Yarn) {
  json j = llama_json();
  j["rope_scaling"] = {{"rope_type", "yarn"},   {"factor", 4.0},     {"original_max_position_embeddings", 64},
                       {"beta_fast", 16.0},     {"beta_slow", 2.0},  {"mscale", 0.707},
                       {"mscale_all_dim", 1.0}, {"truncate", false}, {"attention_factor", 1.25}};
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 2.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_FALSE(c.rope.truncate);
  ASSERT_TRUE(c.rope.attention_factor.has_value());
  EXPECT_DOUBLE_EQ(*c.rope.attention_factor, 1.25);
}

TEST(ModelConfigRopeTest, YarnDefaults) {
  json j = llama_json();
  // beta_fast/beta_slow of 0 or null fall back to 32/1 (`or` in transformers).
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}, {"beta_fast", 0}, {"beta_slow", nullptr}};
  ModelConfig c = parse_model_config(j);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 256);  // max_position_embeddings
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.0);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  EXPECT_TRUE(c.rope.truncate);

  // Without a factor, the ratio max_position_embeddings / original_max_position_embeddings.
  j["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 64}};
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope.factor, 4.0);
  j["rope_scaling"] = {{"type", "yarn"}};
  expect_error(j, {"factor"});
}

TEST(ModelConfigRopeTest, Llama3NeedsItsFields) {
  json j = llama_json();
  json full = {{"rope_type", "llama3"},
               {"factor", 8.0},
               {"low_freq_factor", 1.0},
               {"high_freq_factor", 4.0},
               {"original_max_position_embeddings", 128}};
  j["rope_scaling"] = full;
  EXPECT_EQ(parse_model_config(j).rope.type, RopeType::kLlama3);
  for (const char* field :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    json partial = full;
    partial.erase(field);
    j["rope_scaling"] = partial;
    expect_error(j, {field});
  }
  json same = full;
  same["high_freq_factor"] = 1.0;
  j["rope_scaling"] = same;
  expect_error(j, {"high_freq_factor"});
}

TEST(ModelConfigRopeTest, Errors) {
  json j = llama_json();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_error(j, {"rope type", "dynamic"});
  j["rope_scaling"] = {{"type", "linear"}};
  expect_error(j, {"factor"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", "2"}};
  expect_error(j, {"factor"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -1.0}};
  expect_error(j, {"factor"});
  j["rope_scaling"] = "yarn";
  expect_error(j, {"rope_scaling"});
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = 0.0;
  expect_error(j, {"rope_theta"});
  j["rope_theta"] = "10000";
  expect_error(j, {"rope_theta"});
  j = llama_json();
  j["rope_parameters"] = 5;
  expect_error(j, {"rope_parameters"});
  j["rope_parameters"] = {{"rope_type", "longrope"}};
  expect_error(j, {"longrope"});
  j["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  expect_error(j, {"partial_rotary_factor"});
}

// ---------------------------------------------------------------------------------------------------------
// Errors.

TEST(ModelConfigErrorTest, NotAnObject) {
  expect_error(json::array({1, 2}), {"object"});
}

TEST(ModelConfigErrorTest, UnknownModelType) {
  json j = llama_json();
  j["model_type"] = "mistral";
  expect_error(j, {"model_type", "mistral"});
  j.erase("model_type");
  expect_error(j, {"model_type"});
  j["model_type"] = 3;
  expect_error(j, {"model_type"});
}

TEST(ModelConfigErrorTest, MissingRequiredFieldIsNamed) {
  for (const char* field :
       {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"}) {
    json j = llama_json();
    j.erase(field);
    expect_error(j, {quoted(field), "missing"});
    // null counts as missing too.
    j[field] = nullptr;
    expect_error(j, {quoted(field), "missing"});
  }
  for (const char* field : {"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                            "num_experts_per_tok", "moe_intermediate_size"}) {
    json j = deepseek_v3_json();
    j.erase(field);
    expect_error(j, {quoted(field), "missing"});
  }
}

TEST(ModelConfigErrorTest, WrongTypes) {
  struct Case {
    const char* field;
    json value;
  };
  const Case llama_cases[] = {
      {"hidden_size", "64"},
      {"hidden_size", 64.5},
      {"num_hidden_layers", true},
      {"vocab_size", json::array()},
      {"rms_norm_eps", "1e-6"},
      {"tie_word_embeddings", 1},
      {"attention_bias", "false"},
      {"hidden_act", 1},
      {"eos_token_id", "1"},
      {"eos_token_id", {1, "2"}},
      {"max_position_embeddings", json::object()},
  };
  for (const Case& c : llama_cases) {
    json j = llama_json();
    j[c.field] = c.value;
    expect_error(j, {c.field});
  }
  const Case ds_cases[] = {{"kv_lora_rank", "32"}, {"norm_topk_prob", "true"},     {"topk_method", 1},
                           {"n_group", 2.5},       {"routed_scaling_factor", "x"}, {"q_lora_rank", "48"}};
  for (const Case& c : ds_cases) {
    json j = deepseek_v3_json();
    j[c.field] = c.value;
    expect_error(j, {c.field});
  }
  // An integral float is accepted as an integer.
  json j = llama_json();
  j["hidden_size"] = 64.0;
  EXPECT_EQ(parse_model_config(j).hidden_size, 64);
}

TEST(ModelConfigErrorTest, NonPositiveSizes) {
  for (const char* field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "intermediate_size", "max_position_embeddings"}) {
    json j = llama_json();
    j[field] = 0;
    expect_error(j, {field});
    j[field] = -4;
    expect_error(j, {field});
  }
  json j = llama_json();
  j["rms_norm_eps"] = 0.0;
  expect_error(j, {"rms_norm_eps"});
}

TEST(ModelConfigErrorTest, HeadsNotAMultipleOfKvHeads) {
  json j = llama_json();
  j["num_key_value_heads"] = 3;
  expect_error(j, {"num_attention_heads", "num_key_value_heads"});
}

TEST(ModelConfigErrorTest, HeadDimMustBeEvenAndDerivable) {
  json j = llama_json();
  j["head_dim"] = 15;
  expect_error(j, {"head_dim"});
  j.erase("head_dim");
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 6;
  expect_error(j, {"hidden_size", "num_attention_heads"});
}

TEST(ModelConfigErrorTest, UnsupportedHiddenAct) {
  json j = llama_json();
  j["hidden_act"] = "gelu";
  expect_error(j, {"hidden_act", "gelu"});
}

TEST(ModelConfigErrorTest, MoeInconsistencies) {
  json j = deepseek_v3_json();
  j["n_group"] = 3;  // 8 experts
  expect_error(j, {"n_routed_experts", "n_group"});

  j = deepseek_v3_json();
  j["topk_group"] = 5;  // n_group 4
  expect_error(j, {"topk_group", "n_group"});

  j = deepseek_v3_json();
  j["num_experts_per_tok"] = 9;  // 8 experts
  expect_error(j, {"num_experts_per_tok", "n_routed_experts"});

  j = deepseek_v3_json();
  j["topk_group"] = 1;  // 2 experts per group, 3 per token
  expect_error(j, {"num_experts_per_tok", "topk_group"});

  j = deepseek_v3_json();
  j["first_k_dense_replace"] = 4;  // 3 layers
  expect_error(j, {"first_k_dense_replace"});

  j = deepseek_v3_json();
  j["n_shared_experts"] = -1;
  expect_error(j, {"n_shared_experts"});

  j = deepseek_v3_json();
  j["n_group"] = 8;  // 1 expert per group cannot give a top-2 group score
  j["topk_group"] = 4;
  expect_error(j, {"noaux_tc"});
}

TEST(ModelConfigErrorTest, UnsupportedTopkMethodAndScoring) {
  json j = deepseek_v3_json();
  j["topk_method"] = "random";
  expect_error(j, {"topk_method", "random"});

  j = deepseek_v3_json();
  j["scoring_func"] = "softmax";  // noaux_tc needs sigmoid
  expect_error(j, {"scoring_func", "softmax"});

  j = deepseek_v2_json();
  j["scoring_func"] = "sigmoid";  // greedy needs softmax
  expect_error(j, {"scoring_func", "sigmoid"});
}

TEST(ModelConfigErrorTest, MlaInconsistencies) {
  json j = deepseek_v3_json();
  j["qk_head_dim"] = 23;
  expect_error(j, {"qk_head_dim"});
  j = deepseek_v3_json();
  j["qk_rope_head_dim"] = 7;
  j.erase("qk_head_dim");
  expect_error(j, {"qk_rope_head_dim"});
  j = deepseek_v3_json();
  j["kv_lora_rank"] = 0;
  expect_error(j, {"kv_lora_rank"});
  j = deepseek_v3_json();
  j["q_lora_rank"] = -1;
  expect_error(j, {"q_lora_rank"});
  j = deepseek_v3_json();
  j["attention_bias"] = true;
  expect_error(j, {"attention_bias"});
}

TEST(ModelConfigLoadTest, LoadsADirectoryAndNamesThePathOnError) {
  const std::string dir = ::testing::TempDir() + "/dsinfer_model_config_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/config.json");
    out << deepseek_v3_json().dump();
  }
  EXPECT_EQ(load_model_config(dir).arch, Arch::kDeepseekV3);
  {
    std::ofstream out(dir + "/config.json");
    out << "{\"model_type\": ";
  }
  try {
    load_model_config(dir);
    ADD_FAILURE() << "expected an error for invalid JSON";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/config.json"));
    EXPECT_THAT(e.what(), HasSubstr("invalid JSON"));
  }
  {
    std::ofstream out(dir + "/config.json");
    json j = llama_json();
    j.erase("vocab_size");
    out << j.dump();
  }
  try {
    load_model_config(dir);
    ADD_FAILURE() << "expected an error for a missing field";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/config.json"));
    EXPECT_THAT(e.what(), HasSubstr("vocab_size"));
  }
  EXPECT_THROW(load_model_config(dir + "/nonexistent"), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsinfer
