// Value construction, truthiness, Python str()/repr() and JSON conversion (see jinja_value.h).
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja_strings.h"

namespace dsinfer::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    items.emplace_back(key, std::move(value));
  }
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::move(s);
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.b_ = true;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::namespace_(Dict d) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

namespace {

template <typename Json>
Value value_from_json(const Json& j) {
  using value_t = typename Json::value_t;
  switch (j.type()) {
    case value_t::null:
      return Value::none();
    case value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      DSI_CHECK(u <= static_cast<uint64_t>(INT64_MAX), "chat template: integer ", u, " is too large");
      return Value::integer(static_cast<int64_t>(u));
    }
    case value_t::number_float:
      return Value::number(j.template get<double>());
    case value_t::string:
      return Value::string(j.template get<std::string>());
    case value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e));
      return Value::list(std::move(items));
    }
    case value_t::object: {
      Dict d;
      // nlohmann::json sorts object keys; ordered_json keeps them. Both iterate in their stored order.
      for (auto it = j.begin(); it != j.end(); ++it)
        d.items.emplace_back(it.key(), value_from_json(it.value()));
      return Value::dict(std::move(d));
    }
    default:
      fail("chat template: unsupported JSON value of type ", j.type_name());
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) {
  return value_from_json(j);
}
Value Value::from_json(const nlohmann::ordered_json& j) {
  return value_from_json(j);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return b_;
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0.0;
    case Kind::String:
      return !s_.empty();
    case Kind::List:
      return !list_->empty();
    case Kind::Dict:
      return !dict_->items.empty();
    case Kind::Namespace:
    case Kind::Callable:
      return true;
  }
  return false;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-d.ddde+XX": collect the sign, significant digits and decimal exponent.
  bool neg = sci[0] == '-';
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exp = std::stoi(sci.substr(epos + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {  // CPython repr: fixed notation when -4 <= exp < 16
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += exp < 0 ? "e-" : "e+";
  std::string e = std::to_string(std::abs(exp));
  if (e.size() < 2) e = "0" + e;
  return out + e;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return b_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return float_repr(f_);
    case Kind::String:
      return py_str_repr(s_);
    case Kind::List: {
      std::string out = b_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (b_ && list_->size() == 1) out += ",";
      return out + (b_ ? ")" : "]");
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::Namespace:
      return "<Namespace>";
    case Kind::Callable:
      return "<function " + s_ + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return "list";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Callable:
      return "function";
  }
  return "";
}

List Value::iterate() const {
  switch (kind_) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      return *list_;
    case Kind::Dict: {
      List keys;
      for (const auto& kv : dict_->items) keys.push_back(string(kv.first));
      return keys;
    }
    case Kind::String: {
      List chars;
      for (std::string& c : utf8_chars(s_)) chars.push_back(string(std::move(c)));
      return chars;
    }
    default:
      fail("'", type_name(), "' object is not iterable");
  }
}

Value CallArgs::get(size_t pos, std::string_view name) const {
  if (pos < positional.size()) return positional[pos];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return Value();
}

bool CallArgs::has(size_t pos, std::string_view name) const {
  if (pos < positional.size()) return true;
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return false;
}

void CallArgs::check(std::string_view what, size_t max_positional,
                     std::initializer_list<std::string_view> names) const {
  DSI_CHECK(positional.size() <= max_positional, what, " takes at most ", max_positional,
            " positional arguments (", positional.size(), " given)");
  for (const auto& kv : keyword)
    DSI_CHECK(std::find(names.begin(), names.end(), kv.first) != names.end(), what,
              " got an unexpected keyword argument '", kv.first, "'");
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* hex = "0123456789abcdef";
  auto u_escape = [&](uint32_t u) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(u >> shift) & 0xF];
  };
  out += '"';
  for (uint32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20) {
          u_escape(cp);
        } else if (ensure_ascii && cp >= 0x80) {
          if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            u_escape(0xD800 | (v >> 10));
            u_escape(0xDC00 | (v & 0x3FF));
          } else {
            u_escape(cp);
          }
        } else {
          utf8_append(out, cp);
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  auto newline = [&](int d) {
    if (o.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(o.indent) * d, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      double f = v.as_double();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(f);
      }
      return;
    }
    case Value::Kind::String:
      json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Value::Kind::List: {
      const List& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        json_value(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first, o.ensure_ascii);
        out += o.key_sep;
        json_value(out, items[i]->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      fail("Object of type ", v.type_name(), " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_value(out, v, opts, 0);
  return out;
}

}  // namespace dsinfer::jinja
