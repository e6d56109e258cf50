// JsonRegex: pattern -> syntax tree -> NFA (Thompson) -> DFA (subset construction) -> live states only.
#include "engine/json_regex.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <map>
#include <memory>

#include "core/error.h"

namespace dsinfer {

namespace {

using Set = std::bitset<JsonRegex::kSymbols>;
constexpr int kMaxRepeat = 64;
constexpr size_t kMaxNfaStates = 4000;
// The subset construction's work (NFA states visited in closures) before a pattern is refused as too complex:
// a pattern compiles on the server's I/O thread, within tens of milliseconds.
constexpr size_t kMaxClosureWork = 5'000'000;

Set range(int lo, int hi) {
  Set s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}

Set digits() {
  return range('0', '9');
}
Set word() {
  return range('a', 'z') | range('A', 'Z') | digits() | range('_', '_');
}
Set space() {
  Set s;
  for (char c : std::string_view(" \t\n\r\f\v")) s.set(static_cast<size_t>(c));
  return s;  // (non-ASCII spaces are left out: \s then allows fewer characters, never more)
}
Set all() {
  return Set().set();
}

struct Ast {
  enum Kind { kSet, kCat, kAlt, kRepeat } kind = kCat;
  Set set;
  std::vector<std::unique_ptr<Ast>> children;
  int min = 0, max = -1;  // kRepeat; max -1: unbounded
};

std::unique_ptr<Ast> make_set(const Set& s) {
  auto a = std::make_unique<Ast>();
  a->kind = Ast::kSet;
  a->set = s;
  return a;
}

std::unique_ptr<Ast> make_repeat(std::unique_ptr<Ast> child, int min, int max) {
  auto a = std::make_unique<Ast>();
  a->kind = Ast::kRepeat;
  a->min = min;
  a->max = max;
  a->children.push_back(std::move(child));
  return a;
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  std::unique_ptr<Ast> parse() {
    bool start = false, end = false;
    if (!p_.empty() && p_[0] == '^') {
      start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && !escaped_at(p_.size() - 1)) {
      end = true;
      p_.remove_suffix(1);
    }
    std::unique_ptr<Ast> body = alternation();
    if (i_ != p_.size()) fail_at("unbalanced ')'");
    if ((start || end) && body->kind == Ast::kAlt)  // ^a|b$ anchors each side alone: written ^(a|b)$ here
      fail_at("anchors around a top-level '|' are not supported (write ^(a|b)$)");
    auto top = std::make_unique<Ast>();  // kCat
    if (!start) top->children.push_back(make_repeat(make_set(all()), 0, -1));
    top->children.push_back(std::move(body));
    if (!end) top->children.push_back(make_repeat(make_set(all()), 0, -1));
    return top;
  }

 private:
  // Whether the character at `at` is escaped (an odd run of backslashes before it).
  bool escaped_at(size_t at) const {
    size_t n = 0;
    while (at > n && p_[at - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  [[noreturn]] void fail_at(const std::string& what) const {
    fail("pattern: ", what, " (at offset ", i_, ")");
  }

  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  std::unique_ptr<Ast> alternation() {
    auto first = concatenation();
    if (!more() || peek() != '|') return first;
    auto alt = std::make_unique<Ast>();
    alt->kind = Ast::kAlt;
    alt->children.push_back(std::move(first));
    while (more() && peek() == '|') {
      ++i_;
      alt->children.push_back(concatenation());
    }
    return alt;
  }

  std::unique_ptr<Ast> concatenation() {
    auto cat = std::make_unique<Ast>();  // kCat (empty: matches the empty string)
    while (more() && peek() != '|' && peek() != ')') cat->children.push_back(repetition());
    return cat;
  }

  int number() {
    size_t start = i_;
    int v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail_at(str_cat("a repetition bound above ", kMaxRepeat));
      ++i_;
    }
    if (i_ == start) fail_at("a repetition bound is missing");
    return v;
  }

  std::unique_ptr<Ast> repetition() {
    auto atom_ast = atom();
    while (more()) {
      int min = 0, max = -1;
      const char c = peek();
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        min = number();
        max = min;
        if (more() && peek() == ',') {
          ++i_;
          max = more() && peek() == '}' ? -1 : number();
        }
        if (!more() || peek() != '}') fail_at("'{' without its '}'");
        ++i_;
        if (max >= 0 && max < min) fail_at("a repetition {n,m} with m < n");
      } else {
        break;
      }
      if (more() && (peek() == '?' || peek() == '+'))
        fail_at("lazy or possessive quantifiers are not supported");
      atom_ast = make_repeat(std::move(atom_ast), min, max);
    }
    return atom_ast;
  }

  // An escape's set, for \d \w \s and their complements; literal punctuation and \n \r \t \f \v otherwise.
  Set escape(bool in_class) {
    if (!more()) fail_at("a '\\' at the end");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return digits();
      case 'D':
        return ~digits();
      case 'w':
        return word();
      case 'W':
        return ~word();
      case 's':
        return space();
      case 'S':
        return ~space();
      case 'n':
        return range('\n', '\n');
      case 'r':
        return range('\r', '\r');
      case 't':
        return range('\t', '\t');
      case 'f':
        return range('\f', '\f');
      case 'v':
        return range('\v', '\v');
      default:
        break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) return range(u, u);  // escaped punctuation stands for itself
    if (c == 'b' && in_class) return range('\b', '\b');
    fail_at(str_cat("the escape \\", c, " is not supported"));
  }

  Set literal() {
    const auto u = static_cast<unsigned char>(p_[i_++]);
    if (u >= 0x80) fail_at("non-ASCII characters in patterns are not supported");
    return range(u, u);
  }

  Set char_class() {
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++i_;
    }
    Set s;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      Set item;
      int lo = -1;
      if (peek() == '\\') {
        ++i_;
        item = escape(true);
        if (item.count() == 1) lo = static_cast<int>(item._Find_first());
      } else {
        item = literal();
        lo = static_cast<int>(item._Find_first());
      }
      if (lo >= 0 && i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        Set upper = peek() == '\\' ? (++i_, escape(true)) : literal();
        if (upper.count() != 1) fail_at("a class range to a class");
        const int hi = static_cast<int>(upper._Find_first());
        if (hi < lo) fail_at("a class range out of order");
        item = range(lo, hi);
      }
      s |= item;
    }
    if (!more()) fail_at("'[' without its ']'");
    ++i_;
    return negate ? ~s : s;
  }

  std::unique_ptr<Ast> atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':')
          i_ += 2;
        else
          fail_at("lookaround and named groups are not supported");
      }
      auto inner = alternation();
      if (!more() || peek() != ')') fail_at("'(' without its ')'");
      ++i_;
      return inner;
    }
    if (c == '[') {
      ++i_;
      return make_set(char_class());
    }
    if (c == '.') {
      ++i_;
      Set s = all();
      s.reset('\n');
      s.reset('\r');
      return make_set(s);
    }
    if (c == '\\') {
      ++i_;
      if (more() && peek() >= '1' && peek() <= '9') fail_at("backreferences are not supported");
      if (more() && (peek() == 'b' || peek() == 'B')) fail_at("word boundaries are not supported");
      return make_set(escape(false));
    }
    if (c == '^' || c == '$')
      fail_at("anchors other than a leading '^' and a trailing '$' are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail_at("a quantifier without anything to repeat");
    return make_set(literal());
  }

  std::string_view p_;
  size_t i_ = 0;
};

// Thompson's construction: each state has epsilon moves and at most one move on a set of symbols.
struct Nfa {
  struct State {
    std::vector<int> eps;
    Set on;
    int to = -1;
  };
  std::vector<State> states;

  int add() {
    if (states.size() >= kMaxNfaStates) fail("pattern: too large once its repetitions are expanded");
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }

  // The fragment for `a`: its entry and exit states.
  std::pair<int, int> build(const Ast& a) {
    switch (a.kind) {
      case Ast::kSet: {
        const int s = add(), e = add();
        states[static_cast<size_t>(s)].on = a.set;
        states[static_cast<size_t>(s)].to = e;
        return {s, e};
      }
      case Ast::kCat: {
        const int s = add();
        int end = s;
        for (const auto& child : a.children) {
          const auto [cs, ce] = build(*child);
          states[static_cast<size_t>(end)].eps.push_back(cs);
          end = ce;
        }
        return {s, end};
      }
      case Ast::kAlt: {
        const int s = add(), e = add();
        for (const auto& child : a.children) {
          const auto [cs, ce] = build(*child);
          states[static_cast<size_t>(s)].eps.push_back(cs);
          states[static_cast<size_t>(ce)].eps.push_back(e);
        }
        return {s, e};
      }
      case Ast::kRepeat: {
        const Ast& child = *a.children[0];
        const int s = add();
        int end = s;
        for (int i = 0; i < a.min; ++i) {
          const auto [cs, ce] = build(child);
          states[static_cast<size_t>(end)].eps.push_back(cs);
          end = ce;
        }
        if (a.max < 0) {  // then any number more
          const auto [cs, ce] = build(child);
          const int e = add();
          states[static_cast<size_t>(end)].eps.push_back(cs);
          states[static_cast<size_t>(end)].eps.push_back(e);
          states[static_cast<size_t>(ce)].eps.push_back(cs);
          states[static_cast<size_t>(ce)].eps.push_back(e);
          return {s, e};
        }
        const int e = add();
        for (int i = a.min; i < a.max; ++i) {  // optional copies, each may end the repetition
          states[static_cast<size_t>(end)].eps.push_back(e);
          const auto [cs, ce] = build(child);
          states[static_cast<size_t>(end)].eps.push_back(cs);
          end = ce;
        }
        states[static_cast<size_t>(end)].eps.push_back(e);
        return {s, e};
      }
    }
    return {-1, -1};
  }

  mutable size_t work = 0;

  std::vector<int> closure(std::vector<int> set) const {
    work += set.size() + states.size() / 64;
    if (work > kMaxClosureWork) fail("pattern: too complex to compile (its automaton grows too large)");
    std::vector<bool> in(states.size(), false);
    for (int s : set) in[static_cast<size_t>(s)] = true;
    for (size_t k = 0; k < set.size(); ++k) {
      work += states[static_cast<size_t>(set[k])].eps.size();
      for (int t : states[static_cast<size_t>(set[k])].eps)
        if (!in[static_cast<size_t>(t)]) {
          in[static_cast<size_t>(t)] = true;
          set.push_back(t);
        }
    }
    if (work > kMaxClosureWork) fail("pattern: too complex to compile (its automaton grows too large)");
    std::sort(set.begin(), set.end());
    return set;
  }
};

}  // namespace

class JsonRegexBuilder {
 public:
  static JsonRegex build(std::string_view pattern) {
    const std::unique_ptr<Ast> ast = Parser(pattern).parse();
    Nfa nfa;
    const auto [start, accept] = nfa.build(*ast);
    // Subset construction.
    JsonRegex out;
    std::map<std::vector<int>, uint16_t> ids;
    std::vector<std::vector<int>> sets;
    auto id_of = [&](std::vector<int> set) -> uint16_t {
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      if (sets.size() >= JsonRegex::kMaxStates)
        fail("pattern: too many states (more than ", JsonRegex::kMaxStates, ")");
      const auto id = static_cast<uint16_t>(sets.size());
      ids.emplace(set, id);
      sets.push_back(std::move(set));
      return id;
    };
    out.start_ = id_of(nfa.closure({start}));
    for (size_t d = 0; d < sets.size(); ++d) {
      std::array<uint16_t, JsonRegex::kSymbols> row;
      for (int sym = 0; sym < JsonRegex::kSymbols; ++sym) {
        std::vector<int> moved;
        for (int s : sets[d]) {
          const Nfa::State& st = nfa.states[static_cast<size_t>(s)];
          if (st.to >= 0 && st.on.test(static_cast<size_t>(sym))) moved.push_back(st.to);
        }
        row[static_cast<size_t>(sym)] =
            moved.empty() ? JsonRegex::kDead : id_of(nfa.closure(std::move(moved)));
      }
      out.next_.push_back(row);
      out.accept_.push_back(std::binary_search(sets[d].begin(), sets[d].end(), accept));
    }
    // Only live states: those from which an accepting state can be reached.
    const size_t n = out.next_.size();
    std::vector<bool> live(n, false);
    for (size_t d = 0; d < n; ++d) live[d] = out.accept_[d];
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t d = 0; d < n; ++d) {
        if (live[d]) continue;
        for (uint16_t t : out.next_[d])
          if (t != JsonRegex::kDead && live[t]) {
            live[d] = true;
            changed = true;
            break;
          }
      }
    }
    if (!live[out.start_]) fail("pattern: it matches no string");
    for (auto& row : out.next_)
      for (uint16_t& t : row)
        if (t != JsonRegex::kDead && !live[t]) t = JsonRegex::kDead;
    out.universal_.assign(n, false);
    for (size_t d = 0; d < n; ++d) {
      bool loops = true;
      for (int sym = 0x20; sym < JsonRegex::kSymbols && loops; ++sym)  // ('"' and '\\': tokens checked alone)
        loops = out.next_[d][static_cast<size_t>(sym)] == d || sym == '"' || sym == '\\';
      out.universal_[d] = loops;
    }
    return out;
  }
};

JsonRegex JsonRegex::compile(std::string_view pattern) {
  return JsonRegexBuilder::build(pattern);
}

bool JsonRegex::format(std::string_view name, JsonRegex& out) {
  static const std::string kDate = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static const std::string kTime =
      R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string kOctet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  std::string pattern;
  if (name == "date") {
    pattern = "^" + kDate + "$";
  } else if (name == "time") {
    pattern = "^" + kTime + "$";
  } else if (name == "date-time") {
    pattern = "^" + kDate + "[Tt]" + kTime + "$";
  } else if (name == "uuid") {
    pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  } else if (name == "ipv4") {
    pattern = "^(" + kOctet + R"(\.){3})" + kOctet + "$";
  } else {
    return false;
  }
  out = compile(pattern);
  return true;
}

}  // namespace dsinfer
