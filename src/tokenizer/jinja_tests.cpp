// Jinja tests (see jinja_tests.h).
#include "tokenizer/jinja_tests.h"

#include <map>

#include "core/error.h"
#include "tokenizer/jinja_ops.h"
#include "tokenizer/jinja_strings.h"

namespace dsinfer::jinja {
namespace {

bool t_defined(const Value& v, const CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, const CallArgs&) {
  return v.is_undefined();
}
bool t_none(const Value& v, const CallArgs&) {
  return v.is_none();
}
bool t_string(const Value& v, const CallArgs&) {
  return v.is_string();
}
bool t_mapping(const Value& v, const CallArgs&) {
  return v.is_dict();
}
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
// Jinja's sequence test (has len() and __getitem__) also holds for Undefined.
bool t_sequence(const Value& v, const CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_number(const Value& v, const CallArgs&) {
  return v.is_number();
}
bool t_integer(const Value& v, const CallArgs&) {
  return v.is_int();
}
bool t_float(const Value& v, const CallArgs&) {
  return v.is_float();
}
bool t_boolean(const Value& v, const CallArgs&) {
  return v.is_bool();
}
bool t_true(const Value& v, const CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(const Value& v, const CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_callable(const Value& v, const CallArgs&) {
  return v.is_callable();
}

const Value& one_arg(const CallArgs& a, const char* test) {
  DSI_CHECK(a.positional.size() == 1 && a.keyword.empty(), "test '", test, "' takes exactly one argument");
  return a.positional[0];
}

bool t_odd(const Value& v, const CallArgs&) {
  DSI_CHECK(v.is_integral(), "test 'odd' needs an integer");
  return v.as_int() % 2 != 0;
}
bool t_even(const Value& v, const CallArgs&) {
  DSI_CHECK(v.is_integral(), "test 'even' needs an integer");
  return v.as_int() % 2 == 0;
}
bool t_divisibleby(const Value& v, const CallArgs& a) {
  const Value& n = one_arg(a, "divisibleby");
  DSI_CHECK(v.is_integral() && n.is_integral() && n.as_int() != 0, "test 'divisibleby' needs integers");
  return v.as_int() % n.as_int() == 0;
}
bool t_eq(const Value& v, const CallArgs& a) {
  return values_equal(v, one_arg(a, "eq"));
}
bool t_ne(const Value& v, const CallArgs& a) {
  return !values_equal(v, one_arg(a, "ne"));
}
bool t_lt(const Value& v, const CallArgs& a) {
  return compare("<", v, one_arg(a, "lt"));
}
bool t_le(const Value& v, const CallArgs& a) {
  return compare("<=", v, one_arg(a, "le"));
}
bool t_gt(const Value& v, const CallArgs& a) {
  return compare(">", v, one_arg(a, "gt"));
}
bool t_ge(const Value& v, const CallArgs& a) {
  return compare(">=", v, one_arg(a, "ge"));
}
bool t_in(const Value& v, const CallArgs& a) {
  return contains(one_arg(a, "in"), v);
}
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = one_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool()) return v.as_bool() == o.as_bool();
  if (v.is_namespace()) return &v.namespace_attrs() == &o.namespace_attrs();
  return false;
}
bool t_lower(const Value& v, const CallArgs&) {
  return v.is_string() && py_lower(v.as_string()) == v.as_string();
}
bool t_upper(const Value& v, const CallArgs&) {
  return v.is_string() && py_upper(v.as_string()) == v.as_string();
}

const std::map<std::string_view, TestFn>& registry() {
  static const std::map<std::string_view, TestFn> tests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"callable", t_callable},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"le", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {"ge", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
  };
  return tests;
}

}  // namespace

TestFn find_test(std::string_view name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace dsinfer::jinja
