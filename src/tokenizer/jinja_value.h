// The dynamic value type of the Jinja engine: Python-like semantics (undefined, none, bool, int, float,
// str, list, dict, namespace, callable), truthiness, str()/repr() rendering and JSON conversion.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsinfer::jinja {

class Value;
struct CallArgs;
using List = std::vector<Value>;
// Insertion-ordered string-keyed map (Python dicts keep insertion order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
};
using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = "");
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items);
  static Value tuple(List items);  // a list that renders as (a, b)
  static Value dict(Dict d);
  static Value namespace_(Dict d);
  static Value callable(std::string name, Function fn);
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);  // keeps object key order

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && b_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  // Python numbers: bool counts as an int.
  bool is_integral() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }
  bool is_number() const { return is_integral() || kind_ == Kind::Float; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return s_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& namespace_attrs() const { return *dict_; }  // namespaces are the only mutable objects
  const Function& as_function() const { return *fn_; }
  // For undefined values: what was undefined (used in error messages).
  const std::string& hint() const { return s_; }

  bool truthy() const;
  // Python str(): what {{ value }} renders (undefined renders as "").
  std::string str() const;
  // Python repr(): how the value appears inside a rendered list or dict.
  std::string repr() const;
  // Python type name, for error messages ("str", "list", "dict", "NoneType", ...).
  std::string type_name() const;
  // Elements when iterated: list items, dict keys, string characters; undefined is empty.
  List iterate() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

// Positional and keyword arguments of a filter, test, method or function call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `pos` or named `name`, or undefined when absent.
  Value get(size_t pos, std::string_view name) const;
  bool has(size_t pos, std::string_view name) const;
  // Fails when more than `max_positional` positional args or a keyword outside `names` is given.
  void check(std::string_view what, size_t max_positional,
             std::initializer_list<std::string_view> names) const;
};

// Python json.dumps(value, ensure_ascii, indent, separators, sort_keys); fails for undefined/callables.
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: no indent (single line)
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

// Python repr() of a float (shortest round-trip digits, "1e-05", "1.0", "inf").
std::string float_repr(double f);

}  // namespace dsinfer::jinja
