// Python methods on template values (see jinja_methods.h).
#include "tokenizer/jinja_methods.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/jinja_ops.h"
#include "tokenizer/jinja_strings.h"

namespace dsinfer::jinja {
namespace {

constexpr std::array<std::string_view, 34> kMethods = {
    "split",   "rsplit",  "splitlines", "startswith",   "endswith",     "strip",   "lstrip",
    "rstrip",  "upper",   "lower",      "title",        "capitalize",   "replace", "find",
    "rfind",   "count",   "index",      "isdigit",      "isalpha",      "isalnum", "isspace",
    "isupper", "islower", "join",       "removeprefix", "removesuffix", "items",   "keys",
    "values",  "get",     "cycle",      "zfill",        "center",       "format"};

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) fail(what, " arg must be None or str, not ", v.type_name());
  return v.as_string();
}

int64_t opt_int(const Value& v, int64_t def) {
  if (v.is_undefined() || v.is_none()) return def;
  if (!v.is_integral()) fail("expected an integer argument, got ", v.type_name());
  return v.as_int();
}

const std::string& str_arg(const Value& v, const std::string& method) {
  if (!v.is_string()) fail("str.", method, "() argument must be str, not ", v.type_name());
  return v.as_string();
}

Value string_list(std::vector<std::string> parts) {
  List out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

// str.startswith / endswith: prefix may be a str or a tuple/list of str.
bool affix_match(const std::string& s, const Value& affix, bool prefix, const std::string& method) {
  auto one = [&](const Value& v) {
    const std::string& a = str_arg(v, method);
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

template <typename Pred>
Value all_chars(const std::string& s, Pred pred) {
  std::vector<uint32_t> cps = utf8_decode(s);
  return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
}

// Byte offset -> code point index.
int64_t cp_index(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte_pos)));
}

Value string_method(const std::string& s, const std::string& m, const CallArgs& a) {
  std::string what = "str." + m + "()";
  if (m == "split" || m == "rsplit") {
    a.check(what, 2, {"sep", "maxsplit"});
    std::optional<std::string> sep = opt_str(a.get(0, "sep"), what.c_str());
    DSI_CHECK(!sep || !sep->empty(), "empty separator");
    int64_t maxsplit = opt_int(a.get(1, "maxsplit"), -1);
    return string_list(m == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (m == "splitlines") {
    a.check(what, 1, {"keepends"});
    return string_list(py_splitlines(s, a.get(0, "keepends").truthy()));
  }
  if (m == "startswith" || m == "endswith") {
    a.check(what, 1, {});
    DSI_CHECK(a.positional.size() == 1, what, " takes exactly one argument");
    return Value::boolean(affix_match(s, a.positional[0], m == "startswith", m));
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    a.check(what, 1, {"chars"});
    return Value::string(py_strip(s, opt_str(a.get(0, "chars"), what.c_str()), m != "rstrip", m != "lstrip"));
  }
  if (m == "upper" || m == "lower" || m == "title" || m == "capitalize") {
    a.check(what, 0, {});
    if (m == "upper") return Value::string(py_upper(s));
    if (m == "lower") return Value::string(py_lower(s));
    if (m == "title") return Value::string(py_title(s));
    return Value::string(py_capitalize(s));
  }
  if (m == "replace") {
    a.check(what, 3, {"count"});
    DSI_CHECK(a.positional.size() >= 2, what, " takes at least 2 arguments");
    return Value::string(py_replace(s, str_arg(a.positional[0], m), str_arg(a.positional[1], m),
                                    opt_int(a.get(2, "count"), -1)));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "count") {
    a.check(what, 1, {});
    DSI_CHECK(a.positional.size() == 1, what, " takes exactly one argument");
    const std::string& sub = str_arg(a.positional[0], m);
    if (m == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = m == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      DSI_CHECK(m != "index", "substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, p));
  }
  if (m == "isdigit") return all_chars(s, [](uint32_t c) { return c >= '0' && c <= '9'; });
  if (m == "isalpha")
    return all_chars(s, [](uint32_t c) { return c >= 0x80 || std::isalpha(static_cast<int>(c)); });
  if (m == "isalnum")
    return all_chars(s, [](uint32_t c) { return c >= 0x80 || std::isalnum(static_cast<int>(c)); });
  if (m == "isspace") return all_chars(s, is_py_space);
  if (m == "isupper" || m == "islower") {
    bool upper = m == "isupper";
    bool cased = false;
    for (uint32_t c : utf8_decode(s)) {
      std::string one;
      utf8_append(one, c);
      if (py_upper(one) != py_lower(one)) {
        cased = true;
        if ((upper ? py_upper(one) : py_lower(one)) != one) return Value::boolean(false);
      }
    }
    return Value::boolean(cased);
  }
  if (m == "join") {
    a.check(what, 1, {});
    DSI_CHECK(a.positional.size() == 1, what, " takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : a.positional[0].iterate()) {
      if (!v.is_string()) fail("sequence item: expected str instance, ", v.type_name(), " found");
      if (!first) out += s;
      first = false;
      out += v.as_string();
    }
    return Value::string(out);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    a.check(what, 1, {});
    DSI_CHECK(a.positional.size() == 1, what, " takes exactly one argument");
    const std::string& x = str_arg(a.positional[0], m);
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
    if (m == "removesuffix" && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::string(s.substr(0, s.size() - x.size()));
    return Value::string(s);
  }
  if (m == "zfill" || m == "center") {
    a.check(what, 2, {});
    DSI_CHECK(!a.positional.empty(), what, " takes at least one argument");
    int64_t width = opt_int(a.positional[0], 0);
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return Value::string(s);
    size_t pad = static_cast<size_t>(width - len);
    if (m == "zfill") {
      bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
      return Value::string(sign ? s.substr(0, 1) + std::string(pad, '0') + s.substr(1)
                                : std::string(pad, '0') + s);
    }
    std::string fill = a.positional.size() > 1 ? str_arg(a.positional[1], m) : " ";
    size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
    std::string out;
    for (size_t i = 0; i < left; ++i) out += fill;
    out += s;
    for (size_t i = left; i < pad; ++i) out += fill;
    return Value::string(out);
  }
  if (m == "format") {
    // Positional "{}" / "{0}" fields only.
    std::string out;
    size_t auto_idx = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
        out += '{';
        ++i;
      } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
        out += '}';
        ++i;
      } else if (s[i] == '{') {
        size_t close = s.find('}', i);
        DSI_CHECK(close != std::string::npos, "Single '{' encountered in format string");
        std::string field = s.substr(i + 1, close - i - 1);
        Value v;
        if (field.empty()) {
          v = a.get(auto_idx++, "");
        } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
          v = a.get(static_cast<size_t>(std::stoul(field)), "");
        } else {
          v = a.get(static_cast<size_t>(-1), field);
        }
        DSI_CHECK(!v.is_undefined(), "str.format(): missing argument for field '{", field, "}'");
        out += v.str();
        i = close;
      } else {
        out += s[i];
      }
    }
    return Value::string(out);
  }
  fail("'str' object has no attribute '", m, "'");
}

Value dict_method(const Dict& d, const std::string& m, const CallArgs& a) {
  std::string what = "dict." + m + "()";
  if (m == "items" || m == "keys" || m == "values") {
    a.check(what, 0, {});
    List out;
    for (const auto& [k, v] : d.items) {
      if (m == "items") {
        out.push_back(Value::tuple({Value::string(k), v}));
      } else {
        out.push_back(m == "keys" ? Value::string(k) : v);
      }
    }
    return Value::list(std::move(out));
  }
  if (m == "get") {
    a.check(what, 2, {});
    DSI_CHECK(!a.positional.empty(), what, " takes at least one argument");
    const Value& key = a.positional[0];
    if (key.is_string())
      if (const Value* v = d.find(key.as_string())) return *v;
    return a.positional.size() > 1 ? a.positional[1] : Value::none();
  }
  fail("'dict' object has no attribute '", m, "'");
}

Value list_method(const List& l, const std::string& m, const CallArgs& a) {
  if (m == "index" || m == "count") {
    a.check("list." + m + "()", 1, {});
    DSI_CHECK(a.positional.size() == 1, "list.", m, "() takes exactly one argument");
    int64_t n = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      if (!values_equal(l[i], a.positional[0])) continue;
      if (m == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    DSI_CHECK(m != "index", a.positional[0].repr(), " is not in list");
    return Value::integer(n);
  }
  fail("'list' object has no attribute '", m, "'");
}

}  // namespace

bool is_supported_method(std::string_view name) {
  return std::find(kMethods.begin(), kMethods.end(), name) != kMethods.end();
}

Value call_method(const Value& obj, const std::string& name, const CallArgs& args) {
  require_defined(obj);
  if (obj.is_string()) return string_method(obj.as_string(), name, args);
  if (obj.is_dict()) {
    // The loop object is a dict; loop.cycle(a, b, ...) picks by iteration.
    if (name == "cycle" && obj.as_dict().find("index0") && obj.as_dict().find("length")) {
      DSI_CHECK(!args.positional.empty(), "loop.cycle() needs at least one argument");
      int64_t i = obj.as_dict().find("index0")->as_int();
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }
    return dict_method(obj.as_dict(), name, args);
  }
  if (obj.is_list()) return list_method(obj.as_list(), name, args);
  fail("'", obj.type_name(), "' object has no attribute '", name, "'");
}

}  // namespace dsinfer::jinja
