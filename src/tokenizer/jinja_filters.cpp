// Jinja filters (see jinja_filters.h). tojson follows transformers' override:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
#include "tokenizer/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "tokenizer/jinja_ops.h"
#include "tokenizer/jinja_strings.h"
#include "tokenizer/jinja_tests.h"

namespace dsinfer::jinja {
namespace {

Value f_default(const Value& v, const CallArgs& a) {
  a.check("default", 2, {"default_value", "boolean"});
  bool boolean = a.get(1, "boolean").truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) {
    Value d = a.get(0, "default_value");
    return d.is_undefined() ? Value::string("") : d;
  }
  return v;
}

Value f_length(const Value& v, const CallArgs& a) {
  a.check("length", 0, {});
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return Value::integer(0);
    case Value::Kind::String:
      return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
    case Value::Kind::List:
      return Value::integer(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::Dict:
      return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
    default:
      fail("object of type '", v.type_name(), "' has no len()");
  }
}

std::optional<std::string> chars_arg(const Value& c) {
  if (c.is_undefined() || c.is_none()) return std::nullopt;
  return c.str();
}

Value f_trim(const Value& v, const CallArgs& a) {
  a.check("trim", 1, {"chars"});
  return Value::string(py_strip(v.str(), chars_arg(a.get(0, "chars")), true, true));
}

Value f_string(const Value& v, const CallArgs& a) {
  a.check("string", 0, {});
  return v.is_string() ? v : Value::string(v.str());
}

Value f_upper(const Value& v, const CallArgs& a) {
  a.check("upper", 0, {});
  return Value::string(py_upper(v.str()));
}

Value f_lower(const Value& v, const CallArgs& a) {
  a.check("lower", 0, {});
  return Value::string(py_lower(v.str()));
}

Value f_capitalize(const Value& v, const CallArgs& a) {
  a.check("capitalize", 0, {});
  return Value::string(py_capitalize(v.str()));
}

Value f_title(const Value& v, const CallArgs& a) {
  a.check("title", 0, {});
  return Value::string(py_title(v.str()));
}

Value f_safe(const Value& v, const CallArgs& a) {
  a.check("safe", 0, {});
  return v.is_string() ? v : Value::string(v.str());
}

Value f_first(const Value& v, const CallArgs& a) {
  a.check("first", 0, {});
  List items = v.iterate();
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const CallArgs& a) {
  a.check("last", 0, {});
  List items = v.iterate();
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Jinja's attribute lookup for filters like join/map/sort: "a.b" or "0" path segments.
Value lookup_attribute(const Value& v, const Value& attribute) {
  if (attribute.is_integral()) return get_item(v, attribute);
  Value cur = v;
  for (const std::string& part : py_split(attribute.str(), std::string("."), -1)) {
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    if (cur.is_undefined()) return cur;
  }
  return cur;
}

Value f_join(const Value& v, const CallArgs& a) {
  a.check("join", 2, {"d", "attribute"});
  Value sep = a.get(0, "d");
  Value attribute = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : v.iterate()) {
    if (!first) out += sep.str();
    first = false;
    out += (attribute.is_undefined() || attribute.is_none() ? item : lookup_attribute(item, attribute)).str();
  }
  return Value::string(out);
}

Value f_replace(const Value& v, const CallArgs& a) {
  a.check("replace", 3, {"old", "new", "count"});
  DSI_CHECK(a.has(1, "new"), "replace filter needs the old and new strings");
  Value count = a.get(2, "count");
  return Value::string(py_replace(v.str(), a.get(0, "old").str(), a.get(1, "new").str(),
                                  count.is_undefined() || count.is_none() ? -1 : count.as_int()));
}

Value f_items(const Value& v, const CallArgs& a) {
  a.check("items", 0, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping, not ", v.type_name());
  List out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::tuple({Value::string(k), val}));
  return Value::list(std::move(out));
}

Value f_list(const Value& v, const CallArgs& a) {
  a.check("list", 0, {});
  return Value::list(v.iterate());
}

// Python int() of a numeric string; false when it is not one.
bool parse_int(const std::string& text, int64_t base, int64_t& out) {
  std::string s = py_strip(text, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return false;
  try {
    size_t used = 0;
    out = std::stoll(s, &used, static_cast<int>(base));
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_float(const std::string& text, double& out) {
  std::string s = py_strip(text, std::nullopt, true, true);
  if (s.empty()) return false;
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

Value f_int(const Value& v, const CallArgs& a) {
  a.check("int", 2, {"default", "base"});
  Value def = a.get(0, "default");
  Value fallback = def.is_undefined() ? Value::integer(0) : def;
  Value base = a.get(1, "base");
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float())
    return std::isfinite(v.as_double()) ? Value::integer(static_cast<int64_t>(v.as_double())) : fallback;
  if (v.is_string()) {
    int64_t i;
    if (parse_int(v.as_string(), base.is_undefined() ? 10 : base.as_int(), i)) return Value::integer(i);
    double f;
    if (parse_float(v.as_string(), f) && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
  }
  return fallback;
}

Value f_float(const Value& v, const CallArgs& a) {
  a.check("float", 1, {"default"});
  Value def = a.get(0, "default");
  if (v.is_number()) return Value::number(v.as_double());
  double f;
  if (v.is_string() && parse_float(v.as_string(), f)) return Value::number(f);
  return def.is_undefined() ? Value::number(0.0) : def;
}

Value f_abs(const Value& v, const CallArgs& a) {
  a.check("abs", 0, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_integral()) return Value::integer(std::llabs(v.as_int()));
  fail("bad operand type for abs(): '", v.type_name(), "'");
}

Value f_round(const Value& v, const CallArgs& a) {
  a.check("round", 2, {"precision", "method"});
  int64_t precision = a.get(0, "precision").is_undefined() ? 0 : a.get(0, "precision").as_int();
  std::string method = a.get(1, "method").is_undefined() ? "common" : a.get(1, "method").str();
  require_defined(v);
  DSI_CHECK(v.is_number(), "round filter needs a number, got ", v.type_name());
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  if (method == "common") {
    x = std::nearbyint(x);  // Python's round(): half to even
  } else if (method == "ceil") {
    x = std::ceil(x);
  } else if (method == "floor") {
    x = std::floor(x);
  } else {
    fail("round filter: method must be 'common', 'ceil' or 'floor'");
  }
  return Value::number(x / scale);
}

Value f_tojson(const Value& v, const CallArgs& a) {
  a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii").truthy();
  Value indent = a.get(1, "indent");
  if (!indent.is_undefined() && !indent.is_none()) {
    if (indent.is_string()) fail("tojson: string indents are not supported");
    o.indent = static_cast<int>(std::max<int64_t>(0, indent.as_int()));
    o.item_sep = ",";
  }
  Value seps = a.get(2, "separators");
  if (!seps.is_undefined() && !seps.is_none()) {
    DSI_CHECK(seps.is_list() && seps.as_list().size() == 2, "tojson: separators must be an (item, key) pair");
    o.item_sep = seps.as_list()[0].str();
    o.key_sep = seps.as_list()[1].str();
  }
  o.sort_keys = a.get(3, "sort_keys").truthy();
  return Value::string(to_json(v, o));
}

Value f_reverse(const Value& v, const CallArgs& a) {
  a.check("reverse", 0, {});
  if (v.is_string()) {
    std::vector<std::string> chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::string(out);
  }
  List items = v.iterate();
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// Sort key comparison (case-insensitive for strings unless case_sensitive).
bool less_than(const Value& x, const Value& y, bool case_sensitive) {
  if (!case_sensitive && x.is_string() && y.is_string())
    return py_lower(x.as_string()) < py_lower(y.as_string());
  return compare("<", x, y);
}

Value f_sort(const Value& v, const CallArgs& a) {
  a.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  bool reverse = a.get(0, "reverse").truthy();
  bool cs = a.get(1, "case_sensitive").truthy();
  Value attribute = a.get(2, "attribute");
  List items = v.iterate();
  auto key = [&](const Value& x) { return attribute.is_undefined() ? x : lookup_attribute(x, attribute); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x), cs) : less_than(key(x), key(y), cs);
  });
  return Value::list(std::move(items));
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  a.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  DSI_CHECK(v.is_dict(), "dictsort filter needs a mapping, got ", v.type_name());
  bool cs = a.get(0, "case_sensitive").truthy();
  std::string by = a.get(1, "by").is_undefined() ? "key" : a.get(1, "by").str();
  bool reverse = a.get(2, "reverse").truthy();
  DSI_CHECK(by == "key" || by == "value", "dictsort: 'by' must be 'key' or 'value'");
  List items;
  for (const auto& [k, val] : v.as_dict().items) items.push_back(Value::tuple({Value::string(k), val}));
  size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value& kx = x.as_list()[idx];
    const Value& ky = y.as_list()[idx];
    return reverse ? less_than(ky, kx, cs) : less_than(kx, ky, cs);
  });
  return Value::list(std::move(items));
}

Value f_unique(const Value& v, const CallArgs& a) {
  a.check("unique", 2, {"case_sensitive", "attribute"});
  bool cs = a.get(0, "case_sensitive").truthy();
  Value attribute = a.get(1, "attribute");
  List out, seen;
  for (const Value& item : v.iterate()) {
    Value k = attribute.is_undefined() ? item : lookup_attribute(item, attribute);
    if (!cs && k.is_string()) k = Value::string(py_lower(k.as_string()));
    if (contains(Value::list(seen), k)) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  a.check(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  bool cs = a.get(0, "case_sensitive").truthy();
  Value attribute = a.get(1, "attribute");
  List items = v.iterate();
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  auto key = [&](const Value& x) { return attribute.is_undefined() ? x : lookup_attribute(x, attribute); };
  const Value* best = &items[0];
  for (const Value& x : items) {
    bool better = want_max ? less_than(key(*best), key(x), cs) : less_than(key(x), key(*best), cs);
    if (better) best = &x;
  }
  return *best;
}

Value f_min(const Value& v, const CallArgs& a) {
  return min_max(v, a, false);
}
Value f_max(const Value& v, const CallArgs& a) {
  return min_max(v, a, true);
}

Value f_sum(const Value& v, const CallArgs& a) {
  a.check("sum", 2, {"attribute", "start"});
  Value attribute = a.get(0, "attribute");
  Value total = a.get(1, "start").is_undefined() ? Value::integer(0) : a.get(1, "start");
  for (const Value& x : v.iterate())
    total = binary_op("+", total, attribute.is_undefined() ? x : lookup_attribute(x, attribute));
  return total;
}

Value f_indent(const Value& v, const CallArgs& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  Value w = a.get(0, "width");
  std::string pad = w.is_undefined() ? "    "
                    : w.is_string()  ? w.as_string()
                                     : std::string(static_cast<size_t>(w.as_int()), ' ');
  bool first = a.get(1, "first").truthy();
  bool blank = a.get(2, "blank").truthy();
  std::vector<std::string> lines = py_splitlines(v.str() + "\n", false);  // Jinja appends "\n" first
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value::string(out);
}

Value f_wordcount(const Value& v, const CallArgs& a) {
  a.check("wordcount", 0, {});
  return Value::integer(static_cast<int64_t>(py_split(v.str(), std::nullopt, -1).size()));
}

Value f_center(const Value& v, const CallArgs& a) {
  a.check("center", 1, {"width"});
  Value w = a.get(0, "width");
  int64_t width = w.is_undefined() ? 80 : w.as_int();
  std::string s = v.str();
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  size_t pad = static_cast<size_t>(width - len);
  size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
  return Value::string(std::string(left, ' ') + s + std::string(pad - left, ' '));
}

Value f_escape(const Value& v, const CallArgs& a) {
  a.check("escape", 0, {});
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value::string(out);
}

// map(attribute='x', default=...) or map('filter', args...).
Value f_map(const Value& v, const CallArgs& a) {
  List out;
  Value attribute = a.get(static_cast<size_t>(-1), "attribute");
  if (!attribute.is_undefined()) {
    a.check("map", 0, {"attribute", "default"});
    Value def = a.get(static_cast<size_t>(-1), "default");
    for (const Value& x : v.iterate()) {
      Value r = lookup_attribute(x, attribute);
      out.push_back(r.is_undefined() && !def.is_undefined() ? def : r);
    }
    return Value::list(std::move(out));
  }
  DSI_CHECK(!a.positional.empty() && a.positional[0].is_string(),
            "map filter needs a filter name or attribute=");
  const std::string& name = a.positional[0].as_string();
  FilterFn fn = find_filter(name);
  DSI_CHECK(fn, "map: unsupported filter '", name, "'");
  CallArgs rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword};
  for (const Value& x : v.iterate()) out.push_back(fn(x, rest));
  return Value::list(std::move(out));
}

// select/reject (test on item) and selectattr/rejectattr (test on item.attr).
Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep_if, const char* what) {
  size_t first_arg = by_attr ? 1 : 0;
  Value attribute = by_attr ? a.get(0, "") : Value();
  DSI_CHECK(!by_attr || attribute.is_string(), what, " needs an attribute name");
  TestFn test = nullptr;
  CallArgs test_args;
  if (a.positional.size() > first_arg) {
    DSI_CHECK(a.positional[first_arg].is_string(), what, ": test name must be a string");
    const std::string& name = a.positional[first_arg].as_string();
    test = find_test(name);
    DSI_CHECK(test, what, ": unsupported test '", name, "'");
    test_args.positional.assign(a.positional.begin() + static_cast<long>(first_arg) + 1, a.positional.end());
    test_args.keyword = a.keyword;
  }
  List out;
  for (const Value& x : v.iterate()) {
    Value subject = by_attr ? lookup_attribute(x, attribute) : x;
    bool ok = test ? test(subject, test_args) : subject.truthy();
    if (ok == keep_if) out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, const CallArgs& a) {
  return select_impl(v, a, false, true, "select");
}
Value f_reject(const Value& v, const CallArgs& a) {
  return select_impl(v, a, false, false, "reject");
}
Value f_selectattr(const Value& v, const CallArgs& a) {
  return select_impl(v, a, true, true, "selectattr");
}
Value f_rejectattr(const Value& v, const CallArgs& a) {
  return select_impl(v, a, true, false, "rejectattr");
}

Value f_batch(const Value& v, const CallArgs& a) {
  a.check("batch", 2, {"linecount", "fill_with"});
  int64_t n = a.get(0, "linecount").as_int();
  DSI_CHECK(n > 0, "batch size must be positive");
  Value fill = a.get(1, "fill_with");
  List out, cur;
  for (const Value& x : v.iterate()) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_undefined())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

const std::map<std::string_view, FilterFn>& registry() {
  static const std::map<std::string_view, FilterFn> filters = {
      {"default", f_default},
      {"d", f_default},
      {"length", f_length},
      {"count", f_length},
      {"trim", f_trim},
      {"string", f_string},
      {"upper", f_upper},
      {"lower", f_lower},
      {"capitalize", f_capitalize},
      {"title", f_title},
      {"safe", f_safe},
      {"first", f_first},
      {"last", f_last},
      {"join", f_join},
      {"replace", f_replace},
      {"items", f_items},
      {"list", f_list},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"round", f_round},
      {"tojson", f_tojson},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"unique", f_unique},
      {"min", f_min},
      {"max", f_max},
      {"sum", f_sum},
      {"indent", f_indent},
      {"wordcount", f_wordcount},
      {"center", f_center},
      {"escape", f_escape},
      {"e", f_escape},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"batch", f_batch},
  };
  return filters;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace dsinfer::jinja
