// Python operator semantics for template values (see jinja_ops.h).
#include "tokenizer/jinja_ops.h"

#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja_strings.h"

namespace dsinfer::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'");
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::list(std::move(out));
}

// Python ordering for numbers, strings and lists; -1, 0, 1.
int order(const Value& a, const Value& b, const std::string& op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order matches code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return order(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  require_defined(a);
  require_defined(b);
  fail("'", op, "' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'");
}

// Python index normalization for item access; returns false when out of range.
bool normalize_index(int64_t& i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  return i >= 0 && i < static_cast<int64_t>(size);
}

}  // namespace

void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.hint().empty() ? std::string("value is undefined") : v.hint());
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(a.str() + b.str());
  require_defined(a);
  require_defined(b);
  bool ints = a.is_integral() && b.is_integral();
  bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value::integer(a.as_int() + b.as_int());
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out));
    }
    if (a.is_string() || b.is_string())
      fail("can only concatenate str (not \"", (a.is_string() ? b : a).type_name(), "\") to str");
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value::integer(a.as_int() - b.as_int());
    if (nums) return Value::number(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value::integer(a.as_int() * b.as_int());
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
    if (a.is_integral() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    DSI_CHECK(b.as_double() != 0, "division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) unsupported(op, a, b);
    DSI_CHECK(b.as_double() != 0, "integer division or modulo by zero");
    if (ints) return Value::integer(floor_div(a.as_int(), b.as_int()));
    return Value::number(std::floor(a.as_double() / b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) fail("printf-style '%' string formatting is not supported");
    if (!nums) unsupported(op, a, b);
    DSI_CHECK(b.as_double() != 0, "integer division or modulo by zero");
    if (ints) return Value::integer(floor_mod(a.as_int(), b.as_int()));
    double x = a.as_double(), y = b.as_double();
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::number(r);
  }
  if (op == "**") {
    if (!nums) unsupported(op, a, b);
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return Value::integer(r);
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  fail("unknown operator '", op, "'");
}

Value unary_op(const std::string& op, const Value& a) {
  if (op == "not") return Value::boolean(!a.truthy());
  require_defined(a);
  if (!a.is_number()) fail("bad operand type for unary ", op, ": '", a.type_name(), "'");
  if (op == "+") return a.is_float() ? a : Value::integer(a.as_int());
  return a.is_float() ? Value::number(-a.as_double()) : Value::integer(-a.as_int());
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace:
      return &a.namespace_attrs() == &b.namespace_attrs();
    default:
      return false;
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  int c = order(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  fail("unknown comparison '", op, "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not ", item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& v : container.as_list())
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      fail("argument of type '", container.type_name(), "' is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.namespace_attrs().find(name)) return *v;
  }
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no attribute '", name, "'"));
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      const Value* v =
          obj.is_dict() ? obj.as_dict().find(key.as_string()) : obj.namespace_attrs().find(key.as_string());
      if (v) return *v;
    }
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      if (normalize_index(i, obj.as_list().size())) return obj.as_list()[static_cast<size_t>(i)];
    } else {
      std::vector<std::string> chars = utf8_chars(obj.as_string());
      if (normalize_index(i, chars.size())) return Value::string(chars[static_cast<size_t>(i)]);
    }
  }
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no attribute ", key.repr()));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_integral()) fail("slice ", what, " must be an integer or None, not ", v.type_name());
    return v.as_int();
  };
  std::optional<int64_t> b = bound(start, "start"), e = bound(stop, "stop"), s = bound(step, "step");
  int64_t st = s.value_or(1);
  DSI_CHECK(st != 0, "slice step cannot be zero");
  std::vector<std::string> chars;
  size_t n;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = chars.size();
  } else if (obj.is_list()) {
    n = obj.as_list().size();
  } else {
    fail("'", obj.type_name(), "' object is not subscriptable");
  }
  int64_t len = static_cast<int64_t>(n);
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += len;
    if (st > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  int64_t lo = clamp(b, st > 0 ? 0 : len - 1);
  int64_t hi = clamp(e, st > 0 ? len : -1);
  std::vector<size_t> idx;
  if (st > 0) {
    for (int64_t i = lo; i < hi; i += st) idx.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = lo; i > hi; i += st) idx.push_back(static_cast<size_t>(i));
  }
  if (obj.is_string()) {
    std::string out;
    for (size_t i : idx) out += chars[i];
    return Value::string(std::move(out));
  }
  List out;
  for (size_t i : idx) out.push_back(obj.as_list()[i]);
  return Value::list(std::move(out));
}

}  // namespace dsinfer::jinja
