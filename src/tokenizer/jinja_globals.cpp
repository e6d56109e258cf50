// Global functions for chat templates (see jinja_globals.h).
#include "tokenizer/jinja_globals.h"

#include <ctime>

namespace dsinfer::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox limit for range()

Value range_fn(const CallArgs& a) {
  DSI_CHECK(a.keyword.empty(), "range() takes no keyword arguments");
  DSI_CHECK(!a.positional.empty() && a.positional.size() <= 3, "range expected 1 to 3 arguments, got ",
            a.positional.size());
  for (const Value& v : a.positional)
    DSI_CHECK(v.is_integral(), "'", v.type_name(), "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() == 3) step = a.positional[2].as_int();
  }
  DSI_CHECK(step != 0, "range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    DSI_CHECK(static_cast<int64_t>(out.size()) < kMaxRange, "range() is too big (limit ", kMaxRange,
              " items)");
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

// namespace(...) / dict(...): an optional mapping positional argument plus keyword arguments.
Dict mapping_from_args(const CallArgs& a, const char* what) {
  Dict d;
  DSI_CHECK(a.positional.size() <= 1, what, "() takes at most one positional argument");
  if (!a.positional.empty()) {
    DSI_CHECK(a.positional[0].is_dict(), what, "() positional argument must be a mapping");
    d = a.positional[0].as_dict();
  }
  for (const auto& [k, v] : a.keyword) d.set(k, v);
  return d;
}

Value raise_fn(const CallArgs& a) {
  throw TemplateRaisedError(a.positional.empty() ? std::string() : a.positional[0].str());
}

Value strftime_fn(const CallArgs& a) {
  DSI_CHECK(a.positional.size() == 1 && a.positional[0].is_string(),
            "strftime_now() takes one format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), a.positional[0].as_string().c_str(), &local);
  return Value::string(std::string(buf, n));
}

}  // namespace

void add_global_functions(Dict& globals) {
  auto add = [&](const char* name, Function fn) {
    if (!globals.find(name)) globals.set(name, Value::callable(name, std::move(fn)));
  };
  add("range", range_fn);
  add("namespace", [](const CallArgs& a) { return Value::namespace_(mapping_from_args(a, "namespace")); });
  add("dict", [](const CallArgs& a) { return Value::dict(mapping_from_args(a, "dict")); });
  add("raise_exception", raise_fn);
  add("strftime_now", strftime_fn);
}

}  // namespace dsinfer::jinja
