// JsonSchema: a JSON Schema (OpenAI's response_format json_schema) compiled into the graph that
// JsonSchemaRecognizer walks byte by byte: one node per value shape (object with its properties in the
// declared order, array, string, number, integer, a set of literal values, or a choice decided by the
// value's first byte), plus byte tries for literal values and property keys.
//
// What is enforced: type (one or a list); properties / required / additionalProperties, and minProperties /
// maxProperties (counted for maps); items / prefixItems (tuples; also draft 4's `items` list with
// additionalItems) / minItems / maxItems; minLength / maxLength and pattern / format (date, time, date-time,
// uuid, ipv4) on strings; minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers and numbers
// (exact decimals as written) and multipleOf on integers; enum / const; anyOf / oneOf whose branches begin
// differently (e.g. a type or null) or are objects told apart by a discriminator (a property all of them
// require, with const / enum values no two share: pydantic's discriminated unions); allOf of one schema; $ref
// into the document ($defs, definitions, any JSON pointer; recursion included); nullable. Annotations are
// ignored (title, description, default, examples, format, ...); keywords that constrain values in ways the
// recogniser cannot follow (uniqueItems, patternProperties, ...) are refused with an error naming them,
// never silently dropped.
//
// How answers are shaped (each still valid against the schema): properties come in the schema's order
// (a union's discriminator first), optional ones may be left out; an object with properties gets no other
// keys; literals are written in their compact form.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/json_regex.h"

namespace dsinfer {

class JsonSchema {
 public:
  // Throws dsinfer::Error naming the schema location (a JSON pointer) and what is wrong or unsupported.
  // object_root: the value must be an object (a function's parameters): the schema's object branch is
  // taken, and a schema without one is refused.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema,
                                                   bool object_root = false);
  // compile() through a process-wide cache of the last kCachedSchemas schemas by their text (requests of one
  // application repeat theirs); thread-safe. Refusals are not cached.
  static std::shared_ptr<const JsonSchema> compile_cached(const nlohmann::ordered_json& schema,
                                                          bool object_root = false);
  static constexpr size_t kCachedSchemas = 64;

  static constexpr int kMaxDepth = 32;  // nesting of arrays and objects in an answer
  static constexpr uint32_t kMaxItemsTracked = 255;
  static constexpr uint32_t kMaxStringLength = 65535;  // the largest minLength / maxLength
  // Integers have at most 18 digits (bounds beyond +-(10^18 - 1) are clamped to it).
  static constexpr int64_t kMaxIntegerBound = 999'999'999'999'999'999;
  static constexpr size_t kMaxNodes = 4096;
  static constexpr size_t kMaxTrieNodes = 60000;

  enum class Kind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiteral, kChoice };
  // A non-negative decimal, exactly as a bound was written: whole.frac.
  struct Decimal {
    int64_t whole = 0;  // <= kMaxIntegerBound
    std::string frac;   // fraction digits, no trailing zeros
  };
  // The magnitudes |value| a bounded number may take on one side of zero: from `low` to `high` (either end
  // open), or none.
  struct Magnitudes {
    bool none = false;
    Decimal low;
    bool low_open = false;
    bool has_high = false;  // else unbounded (up to 18 integer digits)
    Decimal high;
    bool high_open = false;
    int64_t whole_min = 0, whole_max = kMaxIntegerBound;  // integer parts of the allowed magnitudes
  };
  static constexpr size_t kMaxBoundFractionDigits = 40;
  static constexpr int64_t kMaxMultipleOf = 1'000'000'000'000'000;  // multipleOf on integers
  struct Property {
    std::string name;
    uint16_t node = 0;
    bool required = false;
  };
  struct Node {
    Kind kind = Kind::kLiteral;
    // kObject: properties in order (keys read through the key trie at key_root), or, without properties,
    // free keys whose values follow `extra` (-1: no keys at all).
    std::vector<Property> properties;
    // [properties + 1]: the first required index at or after i (or size)
    std::vector<uint16_t> next_required;
    // An object union (anyOf / oneOf of objects told apart by a discriminator property): `properties` holds
    // just the discriminator, whose literal values' trie leaves carry the branch index; once its value is
    // read the object goes on as that branch (where the discriminator was moved to the front).
    std::vector<uint16_t> union_branches;
    uint16_t key_root = 0;
    int32_t extra = -1;
    // An object of free keys: how many (minProperties <= kMaxItemsTracked / maxProperties; from 65535 on:
    // unbounded).
    uint32_t min_properties = 0;
    uint32_t max_properties = UINT32_MAX;
    // kArray: item i follows prefix_items[i] (prefixItems, or `items` as a list), later items `items`
    std::vector<uint16_t> prefix_items;
    uint16_t items = 0;
    uint16_t item(uint32_t index) const { return index < prefix_items.size() ? prefix_items[index] : items; }
    uint32_t min_items = 0;
    uint32_t max_items = UINT32_MAX;  // from 65535 on (more than a frame counts): unbounded
    // kLiteral: the values' compact serialisations in the literal trie
    uint16_t literal_root = 0;
    // kString: bounds on its length in characters (code points); counted only when bounded
    uint32_t min_length = 0;
    uint32_t max_length = UINT32_MAX;
    bool length_bounded() const { return min_length > 0 || max_length != UINT32_MAX; }
    int32_t regex = -1;  // `pattern` or an enforced `format`: JsonSchema::regex(i)
    bool string_constrained() const { return length_bounded() || regex >= 0; }
    // kInteger: bounds (inclusive integers within +-kMaxIntegerBound) and multipleOf, tracked only when
    // bounded
    int64_t minimum = -kMaxIntegerBound;
    int64_t maximum = kMaxIntegerBound;
    int64_t multiple_of = 1;
    // kNumber with bounds (any decimals, inclusive or exclusive): the magnitudes allowed on each side of
    // zero, magnitudes[0] for values written without '-', [1] for those with it.
    bool decimal_bounds = false;
    Magnitudes magnitudes[2];
    bool numeric_bounded() const {
      return decimal_bounds || minimum != -kMaxIntegerBound || maximum != kMaxIntegerBound ||
             multiple_of != 1;
    }
    // kChoice: branches whose first bytes differ
    std::vector<uint16_t> branches;
    // Arrays and objects an answer needs below (and including) this value (kUnbounded: none is finite).
    uint8_t min_depth = 0;
  };
  static constexpr uint8_t kUnbounded = 255;

  // Literal values and keys: byte tries. A key trie's leaves carry the property index; every node lists the
  // property indices below it (ascending) so that a prefix is only taken when an allowed key can follow.
  struct TrieNode {
    std::vector<std::pair<uint8_t, uint16_t>> edges;  // by byte
    bool terminal = false;
    int16_t property = -1;
    std::vector<uint16_t> below;
  };

  const Node& node(uint16_t i) const { return nodes_[i]; }
  const TrieNode& trie(uint16_t i) const { return trie_[i]; }
  const JsonRegex& regex(int32_t i) const { return regexes_[static_cast<size_t>(i)]; }
  uint16_t root() const { return root_; }
  size_t num_nodes() const { return nodes_.size(); }
  // The trie node after `byte` from `at`, or -1.
  int32_t trie_next(uint16_t at, uint8_t byte) const;
  // Whether a value of node i may begin with `byte`.
  bool may_start(uint16_t i, uint8_t byte) const;

 private:
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;
  std::vector<TrieNode> trie_;
  std::vector<JsonRegex> regexes_;
  uint16_t root_ = 0;
};

}  // namespace dsinfer
