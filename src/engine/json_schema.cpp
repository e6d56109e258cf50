// JsonSchema::compile: a JSON Schema document to the recogniser's node graph (see the header). Nodes are
// filled in one pass ($ref targets on first use, so recursion works); choices are flattened, merged and
// checked, tries built and minimum depths worked out once everything is known.
#include "engine/json_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "core/error.h"
#include "engine/json_schema_bounds.h"

namespace dsinfer {

using ojson = nlohmann::ordered_json;

namespace {

// Ignored: they describe values without constraining them (format included: an annotation unless a
// validator opts in to asserting it).
const std::set<std::string> kAnnotations = {
    "title",           "description",      "default",       "examples",  "example",
    "format",          "$schema",          "$id",           "$comment",  "$defs",
    "definitions",     "deprecated",       "readOnly",      "writeOnly", "$anchor",
    "contentEncoding", "contentMediaType", "discriminator", "xml",       "externalDocs"};

// Constraints the recogniser cannot enforce: refused rather than ignored (an answer could break them).
const std::set<std::string> kUnsupported = {"patternProperties",
                                            "propertyNames",
                                            "dependentRequired",
                                            "dependentSchemas",
                                            "dependencies",
                                            "if",
                                            "then",
                                            "else",
                                            "not",
                                            "uniqueItems",
                                            "contains",
                                            "minContains",
                                            "maxContains",
                                            "unevaluatedProperties",
                                            "unevaluatedItems",
                                            "$dynamicRef",
                                            "$recursiveRef"};

const char* const kNumberBounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

std::string child_path(const std::string& path, const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~')
      escaped += "~0";
    else if (c == '/')
      escaped += "~1";
    else
      escaped += c;
  }
  return path + "/" + escaped;
}

// The JSON type name of a value, as "type" spells it (integers count as both integer and number).
bool has_type(const ojson& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     v.get<double>() == std::floor(v.get<double>()));
  return type == "number" && v.is_number();
}

}  // namespace

class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(const ojson& doc) : doc_(doc), out_(std::make_shared<JsonSchema>()) {}

  std::shared_ptr<const JsonSchema> run(bool object_root) {
    out_->root_ = ref("#", "#");
    resolve_choices();
    build_tries();
    check_choices();
    min_depths();
    if (object_root) {
      int32_t object = -1;
      for (uint16_t b : out_->nodes_[out_->root_].branches)
        if (out_->nodes_[b].kind == Kind::kObject) object = b;
      if (object < 0) refuse("#", "the schema must describe a JSON object");
      out_->root_ = static_cast<uint16_t>(object);
    }
    const uint8_t depth = out_->nodes_[out_->root_].min_depth;
    DSI_CHECK(depth <= JsonSchema::kMaxDepth, "the schema needs answers nested deeper than ",
              JsonSchema::kMaxDepth,
              " levels, or without end (a required property or item refers back to its own schema)");
    return out_;
  }

 private:
  using Kind = JsonSchema::Kind;

  uint16_t new_node(Kind kind, const std::string& path) {
    DSI_CHECK(out_->nodes_.size() < JsonSchema::kMaxNodes, "the schema is too large (more than ",
              JsonSchema::kMaxNodes, " value shapes)");
    out_->nodes_.emplace_back();
    out_->nodes_.back().kind = kind;
    values_.emplace_back();
    paths_.push_back(path);
    return static_cast<uint16_t>(out_->nodes_.size() - 1);
  }

  uint16_t compile(const ojson& s, const std::string& path) {
    const uint16_t id = new_node(Kind::kChoice, path);
    fill(id, s, path);
    return id;
  }

  // Any JSON value: a choice of every type, containers holding any values.
  uint16_t any() {
    if (any_ >= 0) return static_cast<uint16_t>(any_);
    const uint16_t id = new_node(Kind::kChoice, "(any value)");
    any_ = id;
    const uint16_t object = new_node(Kind::kObject, "(any object)");
    out_->nodes_[object].extra = id;
    const uint16_t array = new_node(Kind::kArray, "(any array)");
    out_->nodes_[array].items = id;
    const uint16_t literals = new_node(Kind::kLiteral, "(true, false, null)");
    values_[literals] = {"true", "false", "null"};
    const uint16_t string = new_node(Kind::kString, "(any string)");
    const uint16_t number = new_node(Kind::kNumber, "(any number)");
    out_->nodes_[id].branches = {object, array, string, number, literals};
    return id;
  }

  [[noreturn]] void refuse(const std::string& path, const std::string& what) {
    fail("at ", path, ": ", what);
  }

  uint16_t ref(const std::string& pointer, const std::string& path) {
    if (auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    if (pointer.empty() || pointer[0] != '#')
      refuse(path, str_cat("$ref \"", pointer,
                           "\" is not supported (only references into this document, \"#...\")"));
    const ojson* target = nullptr;
    try {
      target = &doc_.at(ojson::json_pointer(pointer.substr(1)));
    } catch (const std::exception&) {
      refuse(path, str_cat("$ref \"", pointer, "\" points at nothing in the schema"));
    }
    const uint16_t id = new_node(Kind::kChoice, pointer);
    refs_[pointer] = id;
    fill(id, *target, pointer);
    return id;
  }

  void fill(uint16_t id, const ojson& s, const std::string& path) {
    // Schemas nest (and refer on) through recursion here: bounded, so that no schema can exhaust the stack.
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(depth) { ++d; }
      ~Depth() { --d; }
    } depth(fill_depth_);
    if (fill_depth_ > kMaxFillDepth) refuse(path, "the schema nests (through its references) too deeply");
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema `false` allows no value");
      const uint16_t any_value = any();
      out_->nodes_[id].branches = {any_value};
      return;
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    std::vector<std::string> constraints;  // keywords other than annotations
    for (const auto& [key, value] : s.items()) {
      if (kUnsupported.count(key))
        refuse(path, str_cat("'", key,
                             "' is not supported by constrained decoding (supported: type, properties, "
                             "required, additionalProperties, minProperties, maxProperties, items, "
                             "prefixItems, minItems, maxItems, "
                             "minLength, maxLength, "
                             "pattern, format (date, time, date-time, uuid, ipv4), multipleOf on integers, "
                             "enum, const, anyOf, "
                             "oneOf, allOf of one schema, $ref)"));
      if (!kAnnotations.count(key)) constraints.push_back(key);
    }
    auto only = [&](std::initializer_list<const char*> allowed, const char* what) {
      for (const std::string& key : constraints) {
        bool ok = false;
        for (const char* a : allowed) ok = ok || key == a;
        if (!ok) refuse(path, str_cat("'", key, "' beside '", what, "' is not supported"));
      }
    };
    if (s.contains("$ref")) {
      only({"$ref"}, "$ref");
      if (!s["$ref"].is_string()) refuse(path, "'$ref' must be a string");
      const uint16_t target = ref(s["$ref"].get<std::string>(), path);
      out_->nodes_[id].branches = {target};
      return;
    }
    std::vector<std::string> types = declared_types(s, path);
    if (s.contains("enum") || s.contains("const")) {
      only({"enum", "const", "type", "nullable"}, s.contains("enum") ? "enum" : "const");
      literal(id, s, types, path);
      return;
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      only({key}, key);
      const ojson& list = s[key];
      if (!list.is_array() || list.empty())
        refuse(path, str_cat("'", key, "' must be a non-empty list of schemas"));
      if (std::string(key) == "allOf" && list.size() != 1)
        refuse(path, "'allOf' with more than one schema is not supported");
      std::vector<uint16_t> branches;  // (compile() may move the nodes: no reference into them across it)
      for (size_t i = 0; i < list.size(); ++i)
        branches.push_back(compile(list[i], child_path(child_path(path, key), std::to_string(i))));
      out_->nodes_[id].branches = std::move(branches);
      if (std::string(key) == "oneOf") exclusive_.insert(id);
      return;
    }
    if (types.empty()) {  // no type: read from the keywords present, else any value
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties") ||
          s.contains("minProperties") || s.contains("maxProperties"))
        types = {"object"};
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems"))
        types = {"array"};
      else {
        for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
          if (s.contains(key))
            refuse(path, str_cat("'", key, "' without \"type\": \"integer\" is not supported"));
        if (s.contains("pattern")) refuse(path, "'pattern' without \"type\": \"string\" is not supported");
        const uint16_t any_value = any();
        out_->nodes_[id].branches = {any_value};
        return;
      }
    }
    std::vector<uint16_t> branches;
    for (const std::string& type : types) branches.push_back(typed(s, type, path));
    out_->nodes_[id].branches = std::move(branches);
  }

  std::vector<std::string> declared_types(const ojson& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& e : t) {
          if (!e.is_string()) refuse(path, "'type' must be a string or a list of strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        refuse(path, "'type' must be a string or a non-empty list of strings");
      }
      for (const std::string& type : types)
        if (!kTypes.count(type)) refuse(path, str_cat("unknown type \"", type, "\""));
    }
    if (s.contains("nullable") && s["nullable"] == true && !types.empty() &&
        std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");
    return types;
  }

  void literal(uint16_t id, const ojson& s, const std::vector<std::string>& types, const std::string& path) {
    std::vector<ojson> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) refuse(path, "'enum' must be a non-empty list");
      if (s.contains("const")) refuse(path, "'enum' beside 'const' is not supported");
      for (const ojson& v : s["enum"]) values.push_back(v);
    }
    const uint16_t node = new_node(Kind::kLiteral, path);
    for (const ojson& v : values) {
      bool typed_ok = types.empty();
      for (const std::string& t : types) typed_ok = typed_ok || has_type(v, t);
      if (typed_ok) values_[node].push_back(v.dump());
    }
    if (values_[node].empty()) refuse(path, "no 'enum' / 'const' value has the declared type");
    out_->nodes_[id].branches = {node};
  }

  uint16_t typed(const ojson& s, const std::string& type, const std::string& path) {
    if (type == "string") return string(s, path);
    if (type == "number") return number(s, path);
    if (type == "integer") return integer(s, path);
    if (type == "boolean" || type == "null") {
      const uint16_t node = new_node(Kind::kLiteral, path);
      values_[node] =
          type == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"true", "false"};
      return node;
    }
    return type == "object" ? object(s, path) : array(s, path);
  }

  // Bounds as the closed range of integers they allow, clamped to what an answer can hold.
  // A bound as an integer within +-kMaxIntegerBound (the widest an answer's 18 digits can hold).
  static int64_t clamped(double v) {
    constexpr int64_t kMax = JsonSchema::kMaxIntegerBound;
    if (v >= static_cast<double>(kMax)) return kMax;
    if (v <= -static_cast<double>(kMax)) return -kMax;
    return static_cast<int64_t>(v);  // exact below 2^53; larger bounds are as the double written rounds them
  }

  // Bounds as the closed range of integers they allow.
  uint16_t integer(const ojson& s, const std::string& path) {
    const uint16_t id = new_node(Kind::kInteger, path);
    int64_t lo = -JsonSchema::kMaxIntegerBound, hi = JsonSchema::kMaxIntegerBound;
    for (const char* key : kNumberBounds) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) refuse(path, str_cat("'", key, "' must be a number"));
      const double v = s[key].get<double>();
      const std::string k = key;
      if ((k == "minimum" || k == "exclusiveMinimum") ? v >= 1e18 : v <= -1e18)
        refuse(path, str_cat("'", key, "' leaves no integer of at most 18 digits"));
      if (k == "minimum") lo = std::max(lo, clamped(std::ceil(v)));
      if (k == "exclusiveMinimum") lo = std::max(lo, clamped(std::floor(v) + 1));
      if (k == "maximum") hi = std::min(hi, clamped(std::floor(v)));
      if (k == "exclusiveMaximum") hi = std::min(hi, clamped(std::ceil(v) - 1));
    }
    if (lo > hi) refuse(path, "no integer lies within 'minimum' / 'maximum'");
    int64_t multiple = 1;
    if (s.contains("multipleOf")) {
      const ojson& m = s["multipleOf"];
      const double v = m.is_number() ? m.get<double>() : 0.0;
      if (!(v > 0) || v != std::floor(v) || v > static_cast<double>(JsonSchema::kMaxMultipleOf))
        refuse(path, str_cat("'multipleOf' on integers must be a whole number from 1 to ",
                             JsonSchema::kMaxMultipleOf, ", got ", m.dump()));
      multiple = static_cast<int64_t>(v);
      if (!json_schema_bounds::holds_multiple(lo, hi, multiple))
        refuse(path, "no multiple of 'multipleOf' lies within 'minimum' / 'maximum'");
    }
    out_->nodes_[id].minimum = lo;
    out_->nodes_[id].maximum = hi;
    out_->nodes_[id].multiple_of = multiple;
    return id;
  }

  // Numbers: any decimal bounds, inclusive or exclusive, turned into the magnitudes allowed on each side of
  // zero (json_schema_bounds; the recogniser compares digits as they come, no decimal arithmetic).
  uint16_t number(const ojson& s, const std::string& path) {
    using json_schema_bounds::DecimalBound;
    const uint16_t id = new_node(Kind::kNumber, path);
    if (s.contains("multipleOf"))
      refuse(path, "'multipleOf' is not supported on numbers (on integers it is: \"type\": \"integer\")");
    std::optional<DecimalBound> lower, upper;
    for (const char* key : kNumberBounds) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) refuse(path, str_cat("'", key, "' must be a number"));
      const std::string k = key;
      DecimalBound b;
      try {
        b = json_schema_bounds::parse_decimal(s[key].dump());
      } catch (const Error& e) {
        refuse(path, str_cat("'", key, "' ", e.what()));
      }
      b.open = k.rfind("exclusive", 0) == 0;
      const bool is_lower = k == "minimum" || k == "exclusiveMinimum";
      if (b.beyond && b.negative == is_lower) continue;  // below -10^18 / above 10^18: no constraint
      if (b.beyond) refuse(path, str_cat("'", key, "' leaves no number of at most 18 integer digits"));
      json_schema_bounds::keep_tighter(is_lower ? lower : upper, b, is_lower);
    }
    if (!lower && !upper) return id;
    JsonSchema::Node& node = out_->nodes_[id];
    node.decimal_bounds = true;
    if (!json_schema_bounds::fill_magnitudes(lower, upper, node.magnitudes))
      refuse(path, "no number lies within 'minimum' / 'maximum' / 'exclusiveMinimum' / 'exclusiveMaximum'");
    return id;
  }

  // A keyword that counts (minLength, maxItems, ...): a non-negative integer, written as 3 or 3.0.
  uint64_t count(const ojson& s, const char* key, const std::string& path) {
    const ojson& v = s[key];
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>()) &&
        v.get<double>() < 1e18)
      return static_cast<uint64_t>(v.get<double>());
    refuse(path, str_cat("'", key, "' must be a non-negative integer"));
  }

  uint16_t string(const ojson& s, const std::string& path) {
    const uint16_t id = new_node(Kind::kString, path);
    uint32_t bounds[2] = {0, UINT32_MAX};
    const char* keys[2] = {"minLength", "maxLength"};
    for (int i = 0; i < 2; ++i) {
      if (!s.contains(keys[i])) continue;
      const uint64_t n = count(s, keys[i], path);
      if (n > JsonSchema::kMaxStringLength)
        refuse(path, str_cat("'", keys[i], "' above ", JsonSchema::kMaxStringLength, " is not supported"));
      bounds[i] = static_cast<uint32_t>(n);
    }
    if (bounds[1] < bounds[0]) refuse(path, "'maxLength' is below 'minLength': no string fits");
    out_->nodes_[id].min_length = bounds[0];
    out_->nodes_[id].max_length = bounds[1];
    // A pattern, or a format the decoder enforces (others stay annotations, as JSON Schema makes them).
    JsonRegex regex;
    bool has_regex = false;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) refuse(path, "'pattern' must be a string");
      try {
        regex = JsonRegex::compile(s["pattern"].get<std::string>());
      } catch (const Error& e) {
        refuse(path, e.what());
      }
      has_regex = true;
    }
    if (s.contains("format") && s["format"].is_string()) {
      JsonRegex format;
      if (JsonRegex::format(s["format"].get<std::string>(), format)) {
        if (has_regex) refuse(path, "'pattern' beside an enforced 'format' is not supported");
        regex = std::move(format);
        has_regex = true;
      }
    }
    if (has_regex) {
      if (out_->nodes_[id].length_bounded())
        refuse(path, "'minLength' / 'maxLength' beside 'pattern' or 'format' is not supported");
      out_->nodes_[id].regex = static_cast<int32_t>(out_->regexes_.size());
      out_->regexes_.push_back(std::move(regex));
    }
    return id;
  }

  uint16_t object(const ojson& s, const std::string& path) {
    const uint16_t id = new_node(Kind::kObject, path);
    std::vector<JsonSchema::Property> properties;
    if (s.contains("properties")) {
      const ojson& props = s["properties"];
      if (!props.is_object()) refuse(path, "'properties' must be an object of schemas");
      if (props.size() > JsonSchema::kMaxNodes) refuse(path, "too many properties");
      for (const auto& [name, schema] : props.items())
        properties.push_back(
            {name, compile(schema, child_path(child_path(path, "properties"), name)), false});
    }
    if (s.contains("required")) {
      const ojson& required = s["required"];
      if (!required.is_array()) refuse(path, "'required' must be a list of property names");
      for (const ojson& name : required) {
        if (!name.is_string()) refuse(path, "'required' must be a list of property names");
        auto it = std::find_if(properties.begin(), properties.end(), [&](const JsonSchema::Property& p) {
          return p.name == name.get<std::string>();
        });
        if (it == properties.end())
          refuse(path, str_cat("required property \"", name.get<std::string>(),
                               "\" is not among 'properties' (it could not be generated)"));
        it->required = true;
      }
    }
    int32_t extra = -1;
    if (properties.empty()) {
      const ojson additional = s.value("additionalProperties", ojson(true));
      if (additional.is_boolean())
        extra = additional.get<bool>() ? any() : -1;
      else
        extra = compile(additional, child_path(path, "additionalProperties"));
    }
    // minProperties / maxProperties: counted for an object of free keys (a map); with listed properties only
    // where they hold anyway (the required ones suffice; no other keys are generated).
    uint32_t min_properties = 0, max_properties = UINT32_MAX;
    if (s.contains("minProperties"))
      min_properties = static_cast<uint32_t>(std::min<uint64_t>(count(s, "minProperties", path), UINT32_MAX));
    if (s.contains("maxProperties"))
      max_properties = static_cast<uint32_t>(std::min<uint64_t>(count(s, "maxProperties", path), UINT32_MAX));
    if (max_properties < min_properties)
      refuse(path, "'maxProperties' is below 'minProperties': no object fits");
    if (!properties.empty()) {
      const auto required = static_cast<uint32_t>(std::count_if(
          properties.begin(), properties.end(), [](const JsonSchema::Property& p) { return p.required; }));
      if (min_properties > required)
        refuse(path, "'minProperties' above the number of required properties is not supported");
      if (max_properties < properties.size())
        refuse(path, "'maxProperties' below the number of listed properties is not supported");
      min_properties = 0, max_properties = UINT32_MAX;
    } else {
      if (min_properties > JsonSchema::kMaxItemsTracked)
        refuse(path, str_cat("'minProperties' above ", JsonSchema::kMaxItemsTracked, " is not supported"));
      if (max_properties >= UINT16_MAX) max_properties = UINT32_MAX;  // (more keys than a frame counts)
      if (extra < 0 && min_properties > 0) refuse(path, "'minProperties' asks for keys that are not allowed");
    }
    JsonSchema::Node& node = out_->nodes_[id];
    node.min_properties = min_properties;
    node.max_properties = max_properties;
    node.next_required.assign(properties.size() + 1, static_cast<uint16_t>(properties.size()));
    for (size_t i = properties.size(); i-- > 0;)
      node.next_required[i] = properties[i].required ? static_cast<uint16_t>(i) : node.next_required[i + 1];
    node.properties = std::move(properties);
    node.extra = extra;
    return id;
  }

  uint16_t array(const ojson& s, const std::string& path) {
    const uint16_t id = new_node(Kind::kArray, path);
    uint32_t min_items = 0, max_items = UINT32_MAX;
    auto count = [&](const char* key) { return this->count(s, key, path); };
    if (s.contains("minItems")) {
      const uint64_t n = count("minItems");
      if (n > JsonSchema::kMaxItemsTracked)
        refuse(path, str_cat("'minItems' above ", JsonSchema::kMaxItemsTracked, " is not supported"));
      min_items = static_cast<uint32_t>(n);
    }
    if (s.contains("maxItems")) {
      const uint64_t n = count("maxItems");
      if (n < min_items) refuse(path, "'maxItems' is below 'minItems': no array fits");
      // Counted by the frame's 16-bit counter, which stops at 65535: from there on, unbounded.
      if (n < UINT16_MAX) max_items = static_cast<uint32_t>(n);
    }
    // A tuple: prefixItems (2020-12) then `items` for the rest, or `items` as a list (draft 4 to 2019-09)
    // then additionalItems.
    const char* prefix_key = nullptr;
    const char* rest_key = "items";
    if (s.contains("prefixItems")) {
      if (s.contains("additionalItems")) refuse(path, "'additionalItems' beside 'prefixItems' (use 'items')");
      prefix_key = "prefixItems";
    } else if (s.contains("items") && s["items"].is_array()) {
      prefix_key = "items";
      rest_key = "additionalItems";
    } else if (s.contains("additionalItems")) {
      refuse(path, "'additionalItems' without 'items' as a list applies to nothing");
    }
    std::vector<uint16_t> prefix;
    if (prefix_key) {
      const ojson& list = s[prefix_key];
      if (!list.is_array()) refuse(path, str_cat("'", prefix_key, "' must be a list of schemas"));
      if (list.size() > JsonSchema::kMaxItemsTracked)
        refuse(path, str_cat("more than ", JsonSchema::kMaxItemsTracked, " schemas in '", prefix_key, "'"));
      for (size_t i = 0; i < list.size(); ++i)  // (compile() may move the nodes)
        prefix.push_back(compile(list[i], child_path(child_path(path, prefix_key), std::to_string(i))));
    }
    uint16_t items = 0;
    const ojson spec = s.value(rest_key, ojson(true));
    if (spec.is_array()) refuse(path, str_cat("'", rest_key, "' must be a schema"));
    if (spec == ojson(false)) {
      if (min_items > prefix.size())
        refuse(path, str_cat("'", rest_key, "' is false but 'minItems' asks for more than ", prefix.size(),
                             " items"));
      max_items = std::min<uint32_t>(max_items, static_cast<uint32_t>(prefix.size()));
      items = any();
    } else {
      items = compile(spec, child_path(path, rest_key));
    }
    JsonSchema::Node& node = out_->nodes_[id];
    node.prefix_items = std::move(prefix);
    node.items = items;
    node.min_items = min_items;
    node.max_items = max_items;
    return id;
  }

  // Choices hold only concrete shapes: nested choices flattened, literal sets merged, duplicates dropped.
  void resolve_choices() {
    const size_t n = out_->nodes_.size();
    for (size_t id = 0; id < n; ++id) {
      if (out_->nodes_[id].kind != Kind::kChoice) continue;
      std::vector<uint16_t> flat;
      std::set<size_t> seen;
      bool overlap = false;  // a branch reached twice: a value could match two branches
      flatten(id, flat, seen, id, overlap);
      std::vector<uint16_t> merged =
          merge(flat, paths_[id], exclusive_.count(static_cast<uint16_t>(id)) > 0, overlap);
      out_->nodes_[id].branches = std::move(merged);
    }
  }

  void flatten(size_t id, std::vector<uint16_t>& flat, std::set<size_t>& seen, size_t top, bool& overlap) {
    for (uint16_t b : out_->nodes_[id].branches) {
      if (out_->nodes_[b].kind != Kind::kChoice) {
        if (std::find(flat.begin(), flat.end(), b) == flat.end())
          flat.push_back(b);
        else
          overlap = true;
        continue;
      }
      if (b == top) refuse(paths_[top], "the schema refers to itself without a value in between");
      if (!seen.insert(b).second) {
        overlap = true;
        continue;
      }
      flatten(b, flat, seen, top, overlap);
    }
  }

  // exclusive (oneOf): branches that overlap are refused, since merging them would let a value match two.
  std::vector<uint16_t> merge(const std::vector<uint16_t>& flat,
                              std::string path,  // (a copy: new_node grows paths_)
                              bool exclusive, bool overlap) {
    std::vector<uint16_t> out;
    int32_t string = -1, number = -1, integer = -1, object = -1, array = -1;
    std::vector<uint16_t> objects;
    std::vector<std::string> literals;
    for (uint16_t b : flat) {
      const Kind kind = out_->nodes_[b].kind;
      auto take = [&](int32_t& slot, const char* what) {
        const bool bounded =
            slot >= 0 && ((kind == Kind::kString && (out_->nodes_[b].string_constrained() ||
                                                     out_->nodes_[slot].string_constrained())) ||
                          ((kind == Kind::kInteger || kind == Kind::kNumber) &&
                           (out_->nodes_[b].numeric_bounded() || out_->nodes_[slot].numeric_bounded())));
        if (slot >= 0 && (kind == Kind::kArray || bounded))
          refuse(path, str_cat("anyOf / oneOf / type list with two ", what,
                               " branches is not supported (branches must begin differently: different "
                               "types, or literals)"));
        if (slot >= 0) overlap = true;
        if (slot < 0) slot = b;
      };
      switch (kind) {
        case Kind::kString:
          take(string, "string");
          break;
        case Kind::kNumber:
          take(number, "number");
          break;
        case Kind::kInteger:
          take(integer, "integer");
          break;
        case Kind::kObject:
          objects.push_back(b);
          break;
        case Kind::kArray:
          take(array, "array");
          break;
        case Kind::kLiteral:
          for (const std::string& v : values_[b]) {
            if (std::find(literals.begin(), literals.end(), v) == literals.end())
              literals.push_back(v);
            else
              overlap = true;
          }
          break;
        case Kind::kChoice:
          break;
      }
    }
    if (objects.size() == 1) object = objects[0];
    if (objects.size() > 1) object = object_union(objects, path);
    if (number >= 0 && integer >= 0) {
      overlap = true;
      if (out_->nodes_[number].numeric_bounded() || out_->nodes_[integer].numeric_bounded())
        refuse(path, "an integer branch beside a number branch with bounds is not supported");
    }
    if (number >= 0) integer = -1;  // a number covers the integers
    // Literals an open shape already covers go; ones that would compete with it are refused.
    std::vector<std::string> kept;
    for (const std::string& v : literals) {
      const char c = v[0];
      const bool numeric = c == '-' || (c >= '0' && c <= '9');
      if (c == '"' && string >= 0 && out_->nodes_[string].string_constrained())
        refuse(path, str_cat("the literal ", v, " competes with a string branch with length bounds"));
      if (numeric && number >= 0 && out_->nodes_[number].numeric_bounded())
        refuse(path, str_cat("the literal ", v, " competes with a number branch with bounds"));
      if ((c == '"' && string >= 0) || (numeric && number >= 0)) {
        overlap = true;
        continue;
      }
      if (numeric && integer >= 0) {
        overlap = true;
        if (out_->nodes_[integer].numeric_bounded())
          refuse(path, str_cat("the literal ", v, " competes with an integer branch with bounds"));
        if (v.find_first_of(".eE") == std::string::npos) continue;
        refuse(path, str_cat("the literal ", v, " competes with an integer branch"));
      }
      if ((c == '{' && object >= 0) || (c == '[' && array >= 0))
        refuse(path,
               str_cat("the literal ", v, " competes with an ", c == '{' ? "object" : "array", " branch"));
      kept.push_back(v);
    }
    if (exclusive && overlap)
      refuse(path,
             "oneOf branches overlap (a value could match two of them); use anyOf, or branches of different "
             "types");
    for (int32_t slot : {object, array, string, number, integer})
      if (slot >= 0) out.push_back(static_cast<uint16_t>(slot));
    if (!kept.empty()) {
      // One literal branch kept whole is reused; otherwise the kept values make a new set.
      int32_t reuse = -1;
      for (uint16_t b : flat)
        if (out_->nodes_[b].kind == Kind::kLiteral && values_[b] == kept) reuse = b;
      if (reuse >= 0) {
        out.push_back(static_cast<uint16_t>(reuse));
      } else {
        const uint16_t node = new_node(Kind::kLiteral, path);
        values_[node] = std::move(kept);
        out.push_back(node);
      }
    }
    if (out.empty()) refuse(path, "no value can match this schema (it refers only to itself)");
    return out;
  }

  // The literal values a schema node allows, when that is all it allows (a const or enum, through $refs).
  std::optional<std::vector<std::string>> literal_values(uint16_t id) {
    if (out_->nodes_[id].kind != Kind::kChoice) return std::nullopt;
    std::vector<uint16_t> flat;
    std::set<size_t> seen;
    bool overlap = false;
    flatten(id, flat, seen, id, overlap);
    std::vector<std::string> values;
    for (uint16_t b : flat) {
      if (out_->nodes_[b].kind != Kind::kLiteral) return std::nullopt;
      values.insert(values.end(), values_[b].begin(), values_[b].end());
    }
    return values;
  }

  // Several object branches: one object union, told apart by the first property (in the first branch's
  // order) that every branch requires with literal values no two branches share. Each branch gets that
  // property moved to its front (the order of generation is ours to choose).
  uint16_t object_union(const std::vector<uint16_t>& objects, const std::string& path) {
    if (objects.size() > 255) refuse(path, "too many object branches");
    const std::vector<JsonSchema::Property> first = out_->nodes_[objects[0]].properties;
    for (const JsonSchema::Property& candidate : first) {
      if (!candidate.required) continue;
      std::vector<std::string> all;
      std::vector<int16_t> tags;
      bool ok = true;
      for (size_t k = 0; k < objects.size() && ok; ++k) {
        const std::vector<JsonSchema::Property>& props = out_->nodes_[objects[k]].properties;
        auto it = std::find_if(props.begin(), props.end(),
                               [&](const JsonSchema::Property& p) { return p.name == candidate.name; });
        std::optional<std::vector<std::string>> values;
        if (it != props.end() && it->required) values = literal_values(it->node);
        ok = values.has_value() && !values->empty();
        for (size_t v = 0; ok && v < values->size(); ++v) {
          ok = std::find(all.begin(), all.end(), (*values)[v]) == all.end();
          all.push_back((*values)[v]);
          tags.push_back(static_cast<int16_t>(k));
        }
      }
      if (!ok) continue;
      for (uint16_t b : objects) discriminate(b, candidate.name, path);
      const uint16_t literal = new_node(Kind::kLiteral, path);
      values_[literal] = std::move(all);
      value_tags_.resize(out_->nodes_.size());
      value_tags_[literal] = std::move(tags);
      const uint16_t id = new_node(Kind::kObject, path);
      JsonSchema::Node& node = out_->nodes_[id];
      node.properties = {{candidate.name, literal, true}};
      node.next_required = {0, 1};
      node.union_branches = objects;
      return id;
    }
    refuse(path,
           "anyOf / oneOf with several object branches needs a discriminator: a property every branch "
           "requires, with const / enum values no two branches share");
  }

  // Moves the discriminator to the front of a branch's properties.
  void discriminate(uint16_t object, const std::string& name, const std::string& path) {
    auto [it, fresh] = discriminators_.emplace(object, name);
    if (!fresh && it->second != name)
      refuse(path, "an object is a branch of two unions with different discriminators");
    JsonSchema::Node& node = out_->nodes_[object];
    auto p = std::find_if(node.properties.begin(), node.properties.end(),
                          [&](const JsonSchema::Property& q) { return q.name == name; });
    std::rotate(node.properties.begin(), p, p + 1);
    node.next_required.assign(node.properties.size() + 1, static_cast<uint16_t>(node.properties.size()));
    for (size_t i = node.properties.size(); i-- > 0;)
      node.next_required[i] =
          node.properties[i].required ? static_cast<uint16_t>(i) : node.next_required[i + 1];
  }

  uint16_t new_trie_node() {
    DSI_CHECK(out_->trie_.size() < JsonSchema::kMaxTrieNodes,
              "the schema is too large (its enum values and property names exceed ",
              JsonSchema::kMaxTrieNodes, " trie nodes)");
    out_->trie_.emplace_back();
    return static_cast<uint16_t>(out_->trie_.size() - 1);
  }

  uint16_t add_to_trie(uint16_t at, const std::string& bytes, int16_t property) {
    for (char ch : bytes) {
      const uint8_t b = static_cast<uint8_t>(ch);
      if (property >= 0) out_->trie_[at].below.push_back(static_cast<uint16_t>(property));
      const int32_t next = out_->trie_next(at, b);
      if (next >= 0) {
        at = static_cast<uint16_t>(next);
        continue;
      }
      const uint16_t child = new_trie_node();
      out_->trie_[at].edges.emplace_back(b, child);
      at = child;
    }
    out_->trie_[at].terminal = true;
    if (property >= 0) {
      out_->trie_[at].property = property;
      out_->trie_[at].below.push_back(static_cast<uint16_t>(property));
    }
    return at;
  }

  // Tries for the literal sets the resolved choices use (merging leaves the sets it merged unused) and for
  // the keys of objects with properties.
  void build_tries() {
    std::vector<bool> used(out_->nodes_.size(), false);
    size_t bytes = 0;
    for (const JsonSchema::Node& node : out_->nodes_) {
      if (node.kind == Kind::kObject && !node.union_branches.empty()) used[node.properties[0].node] = true;
      if (node.kind != Kind::kChoice) continue;
      for (uint16_t b : node.branches) used[b] = true;
    }
    value_tags_.resize(out_->nodes_.size());
    for (size_t id = 0; id < out_->nodes_.size(); ++id)
      if (used[id])
        for (const std::string& v : values_[id]) bytes += v.size();
    out_->trie_.reserve(std::min(bytes + out_->nodes_.size(), JsonSchema::kMaxTrieNodes));
    for (size_t id = 0; id < out_->nodes_.size(); ++id) {
      JsonSchema::Node& node = out_->nodes_[id];
      if (node.kind == Kind::kLiteral && used[id]) {
        node.literal_root = new_trie_node();
        for (size_t i = 0; i < values_[id].size(); ++i)  // (a union's discriminator: leaves carry the branch)
          add_to_trie(out_->nodes_[id].literal_root, values_[id][i],
                      i < value_tags_[id].size() ? value_tags_[id][i] : int16_t{-1});
      } else if (node.kind == Kind::kObject && !node.properties.empty()) {
        node.key_root = new_trie_node();
        for (size_t k = 0; k < out_->nodes_[id].properties.size(); ++k)
          add_to_trie(out_->nodes_[id].key_root, ojson(out_->nodes_[id].properties[k].name).dump(),
                      static_cast<int16_t>(k));
      }
    }
  }

  // Branches of a choice must begin with different bytes (the recogniser decides at the first byte).
  void check_choices() {
    for (size_t id = 0; id < out_->nodes_.size(); ++id) {
      const JsonSchema::Node& node = out_->nodes_[id];
      if (node.kind != Kind::kChoice) continue;
      for (int byte = 0; byte < 256; ++byte) {
        int starts = 0;
        for (uint16_t b : node.branches) starts += out_->may_start(b, static_cast<uint8_t>(byte));
        if (starts > 1)
          refuse(paths_[id],
                 str_cat("two branches of anyOf / oneOf can begin with '", static_cast<char>(byte),
                         "' (branches must begin differently: different types, or literals)"));
      }
    }
  }

  void min_depths() {
    constexpr int kInf = JsonSchema::kUnbounded;
    std::vector<int> depth(out_->nodes_.size(), kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t id = 0; id < out_->nodes_.size(); ++id) {
        const JsonSchema::Node& node = out_->nodes_[id];
        int d = 0;
        switch (node.kind) {
          case Kind::kObject:
            if (!node.union_branches.empty()) {  // opened only where every branch fits
              d = 0;
              for (uint16_t b : node.union_branches) d = std::max(d, depth[b]);
              break;
            }
            d = 1;
            for (const auto& p : node.properties)
              if (p.required) d = std::max(d, depth[p.node] >= kInf ? kInf : 1 + depth[p.node]);
            if (node.min_properties > 0)  // (a map: its values follow `extra`)
              d = std::max(d, depth[node.extra] >= kInf ? kInf : 1 + depth[node.extra]);
            break;
          case Kind::kArray:
            d = 1;
            for (uint32_t i = 0; i < node.min_items && i <= node.prefix_items.size(); ++i)
              d = std::max(d, depth[node.item(i)] >= kInf ? kInf : 1 + depth[node.item(i)]);
            break;
          case Kind::kChoice:
            d = kInf;
            for (uint16_t b : node.branches) d = std::min(d, depth[b]);
            break;
          default:
            break;
        }
        d = std::min(d, kInf);
        if (d < depth[id]) {
          depth[id] = d;
          changed = true;
        }
      }
    }
    for (size_t id = 0; id < out_->nodes_.size(); ++id)
      out_->nodes_[id].min_depth = static_cast<uint8_t>(depth[id]);
  }

  const ojson& doc_;
  std::shared_ptr<JsonSchema> out_;
  std::vector<std::vector<std::string>> values_;  // by node: a literal node's compact values
  std::vector<std::string> paths_;                // by node: where it came from (for errors)
  std::map<std::string, uint16_t> refs_;
  std::set<uint16_t> exclusive_;                    // choices from oneOf
  std::vector<std::vector<int16_t>> value_tags_;    // by node: a union discriminator's branch per value
  std::map<uint16_t, std::string> discriminators_;  // union branches: the property moved to their front
  int32_t any_ = -1;
  static constexpr int kMaxFillDepth = 256;
  int fill_depth_ = 0;
};

std::shared_ptr<const JsonSchema> JsonSchema::compile(const ojson& schema, bool object_root) {
  return JsonSchemaCompiler(schema).run(object_root);
}

std::shared_ptr<const JsonSchema> JsonSchema::compile_cached(const ojson& schema, bool object_root) {
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<const JsonSchema>>> cache;  // most recent first
  std::string key = schema.dump();
  key.push_back(object_root ? 'o' : 'v');
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = cache.begin(); it != cache.end(); ++it) {
      if (it->first != key) continue;
      cache.splice(cache.begin(), cache, it);
      return cache.front().second;
    }
  }
  std::shared_ptr<const JsonSchema> compiled = compile(schema, object_root);  // (outside the lock)
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace_front(key, compiled);
  if (cache.size() > kCachedSchemas) cache.pop_back();
  return compiled;
}

int32_t JsonSchema::trie_next(uint16_t at, uint8_t byte) const {
  for (const auto& [b, child] : trie_[at].edges)
    if (b == byte) return child;
  return -1;
}

bool JsonSchema::may_start(uint16_t i, uint8_t byte) const {
  const Node& n = nodes_[i];
  switch (n.kind) {
    case Kind::kObject:
      return byte == '{';
    case Kind::kArray:
      return byte == '[';
    case Kind::kString:
      return byte == '"';
    case Kind::kNumber:
    case Kind::kInteger:
      return byte == '-' || (byte >= '0' && byte <= '9');
    case Kind::kLiteral:
      return trie_next(n.literal_root, byte) >= 0;
    case Kind::kChoice:
      for (uint16_t b : n.branches)
        if (may_start(b, byte)) return true;
      return false;
  }
  return false;
}

}  // namespace dsinfer
