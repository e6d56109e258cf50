// Jinja parser (see jinja_parser.h). Precedence follows Jinja 3.1: conditional < or < and < not <
// comparisons < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters/tests.
#include "tokenizer/jinja_parser.h"

#include <set>

#include "core/error.h"
#include "tokenizer/jinja_filters.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_methods.h"
#include "tokenizer/jinja_tests.h"

namespace dsinfer::jinja {

bool is_global_function(std::string_view name) {
  return name == "range" || name == "namespace" || name == "raise_exception" || name == "dict" ||
         name == "strftime_now";
}

namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  TemplateAst parse() {
    TemplateAst ast;
    ast.body = parse_body({});
    check_calls();
    return ast;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  Token next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(std::string_view op) const { return cur().type == T::Op && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == T::Name && cur().text == name; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
  }
  [[noreturn]] void error(int line, const std::string& msg) const {
    fail("chat template line ", line, ": ", msg);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::Eof:
        return "end of template";
      case T::BlockEnd:
        return "end of statement block";
      case T::VarEnd:
        return "end of print statement";
      case T::String:
        return "string literal";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) error(cur().line, "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != T::Name) error(cur().line, "expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != T::BlockEnd)
      error(cur().line, "expected end of statement block, got " + describe(cur()));
    ++pos_;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses nodes until a block tag whose keyword is in `ends`; that keyword is consumed and stored
  // in end_found (the rest of that tag is left for the caller).
  NodeList parse_body(const std::set<std::string>& ends, std::string* end_found = nullptr) {
    NodeList nodes;
    int start_line = cur().line;
    while (true) {
      const Token& t = cur();
      if (t.type == T::Eof) {
        if (ends.empty()) return nodes;
        std::string list;
        for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
        error(start_line, "unclosed block: expected " + list + " before the end of the template");
      }
      if (t.type == T::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->line = t.line;
        n->text = t.text;
        nodes.push_back(std::move(n));
        ++pos_;
      } else if (t.type == T::VarBegin) {
        ++pos_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->line = t.line;
        n->expr = parse_tuple(true);
        if (cur().type != T::VarEnd)
          error(cur().line, "expected end of print statement, got " + describe(cur()));
        ++pos_;
        nodes.push_back(std::move(n));
      } else if (t.type == T::BlockBegin) {
        ++pos_;
        if (cur().type != T::Name) error(cur().line, "expected a statement name, got " + describe(cur()));
        std::string kw = cur().text;
        if (ends.count(kw)) {
          ++pos_;
          if (end_found) *end_found = kw;
          return nodes;
        }
        nodes.push_back(parse_statement());
      } else {
        error(t.line, "unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement() {
    const Token kw = next();
    auto n = std::make_unique<Node>();
    n->line = kw.line;
    const std::string& k = kw.text;
    if (k == "if") {
      parse_if(*n);
    } else if (k == "for") {
      parse_for(*n);
    } else if (k == "set") {
      parse_set(*n);
    } else if (k == "macro") {
      parse_macro(*n);
    } else if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) error(kw.line, "'" + k + "' outside of a for loop");
      n->kind = k == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
    } else if (k == "filter") {
      parse_filter_block(*n);
    } else if (k == "with") {
      parse_with(*n);
    } else if (k == "generation") {
      n->kind = Node::Kind::Scope;
      expect_block_end();
      n->bodies.push_back(parse_body({"endgeneration"}));
      expect_block_end();
    } else if (k.rfind("end", 0) == 0 || k == "elif" || k == "else") {
      error(kw.line, "unexpected '" + k + "' tag");
    } else {
      error(kw.line, "unsupported statement '" + k + "'");
    }
    return n;
  }

  void parse_if(Node& n) {
    n.kind = Node::Kind::If;
    n.conds.push_back(parse_tuple(true));
    expect_block_end();
    while (true) {
      std::string end;
      NodeList body = parse_body({"elif", "else", "endif"}, &end);
      if (end == "elif") {
        n.bodies.push_back(std::move(body));
        n.conds.push_back(parse_tuple(true));
        expect_block_end();
      } else if (end == "else") {
        n.bodies.push_back(std::move(body));
        expect_block_end();
        n.else_body = parse_body({"endif"});
        expect_block_end();
        return;
      } else {
        n.bodies.push_back(std::move(body));
        expect_block_end();
        return;
      }
    }
  }

  Target parse_target(bool allow_attr) {
    Target t;
    int line = cur().line;
    t.names.push_back(expect_name());
    if (allow_attr && accept_op(".")) {
      t.attr = expect_name();
      return t;
    }
    while (accept_op(",")) {
      t.tuple = true;
      if (cur().type != T::Name) break;
      t.names.push_back(expect_name());
    }
    for (const auto& name : t.names) {
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
          name == "None")
        error(line, "cannot assign to '" + name + "'");
      assigned_.insert(name);
    }
    return t;
  }

  void parse_for(Node& n) {
    n.kind = Node::Kind::For;
    n.target = parse_target(false);
    if (!accept_name("in")) error(cur().line, "expected 'in' in for loop, got " + describe(cur()));
    n.expr = parse_tuple(false);
    if (accept_name("if")) n.cond = parse_tuple(true);
    if (is_name("recursive")) error(cur().line, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    n.bodies.push_back(parse_body({"else", "endfor"}, &end));
    --loop_depth_;
    expect_block_end();
    if (end == "else") {
      n.else_body = parse_body({"endfor"});
      expect_block_end();
    }
  }

  void parse_set(Node& n) {
    n.kind = Node::Kind::Set;
    n.target = parse_target(true);
    if (accept_op("=")) {
      n.expr = parse_tuple(true);
      expect_block_end();
      return;
    }
    if (n.target.tuple || !n.target.attr.empty()) error(n.line, "block set needs a single variable name");
    if (is_op("|")) error(cur().line, "filters on block set are not supported");
    expect_block_end();
    n.bodies.push_back(parse_body({"endset"}));
    expect_block_end();
  }

  void parse_macro(Node& n) {
    n.kind = Node::Kind::Macro;
    n.text = expect_name();
    macros_.insert(n.text);
    expect_op("(");
    while (!accept_op(")")) {
      if (!n.params.empty()) expect_op(",");
      if (accept_op(")")) break;
      std::string param = expect_name();
      assigned_.insert(param);
      ExprPtr def;
      if (accept_op("=")) def = parse_expression(true);
      n.params.emplace_back(param, std::move(def));
    }
    expect_block_end();
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    n.bodies.push_back(parse_body({"endmacro"}));
    loop_depth_ = saved_depth;
    if (cur().type == T::Name) ++pos_;  // {% endmacro name %}
    expect_block_end();
  }

  void parse_filter_block(Node& n) {
    n.kind = Node::Kind::FilterBlock;
    ExprPtr chain = make(Expr::Kind::Literal, n.line);  // placeholder input, replaced by the body
    chain = parse_filter(std::move(chain), false);
    while (is_op("|")) chain = parse_filter(std::move(chain), true);
    n.expr = std::move(chain);
    expect_block_end();
    n.bodies.push_back(parse_body({"endfilter"}));
    expect_block_end();
  }

  void parse_with(Node& n) {
    n.kind = Node::Kind::With;
    while (cur().type != T::BlockEnd) {
      if (!n.params.empty()) expect_op(",");
      std::string name = expect_name();
      assigned_.insert(name);
      expect_op("=");
      n.params.emplace_back(name, parse_expression(true));
    }
    expect_block_end();
    n.bodies.push_back(parse_body({"endwith"}));
    expect_block_end();
  }

  // ---- expressions ----

  // An expression, or an implicit tuple "a, b" (rendered like a list).
  ExprPtr parse_tuple(bool with_condexpr) {
    int line = cur().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    ExprPtr tuple = make(Expr::Kind::Tuple, line);
    tuple->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().type == T::BlockEnd || cur().type == T::VarEnd || is_op(")")) break;
      tuple->items.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      int line = next().line;
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (accept_name("else")) other = parse_condexpr();
      ExprPtr c = make(Expr::Kind::Conditional, line);
      c->items.push_back(std::move(expr));
      c->items.push_back(std::move(cond));
      c->items.push_back(std::move(other));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    ExprPtr e = make(Expr::Kind::Binary, line);
    e->name = op;
    e->items.push_back(std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = next().line;
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = next().line;
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = next().line;
      ExprPtr e = make(Expr::Kind::Unary, line);
      e->name = "not";
      e->items.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++pos_;
        op = "in";
      } else if (is_name("not") && peek().type == T::Name && peek().text == "in") {
        pos_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare, line);
        cmp->items.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token op = next();
      left = binary(op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      Token op = next();
      node = make(Expr::Kind::Unary, op.line);
      node->name = op.text;
      node->items.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token t = cur();
    switch (t.type) {
      case T::Name: {
        ++pos_;
        ExprPtr e = make(Expr::Kind::Literal, t.line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
        }
        return e;
      }
      case T::String: {
        std::string s;
        while (cur().type == T::String) s += next().text;
        ExprPtr e = make(Expr::Kind::Literal, t.line);
        e->value = Value::string(std::move(s));
        return e;
      }
      case T::Int: {
        ++pos_;
        ExprPtr e = make(Expr::Kind::Literal, t.line);
        try {
          e->value = Value::integer(std::stoll(t.text));
        } catch (const std::exception&) {
          error(t.line, "integer literal " + t.text + " is out of range");
        }
        return e;
      }
      case T::Float: {
        ++pos_;
        ExprPtr e = make(Expr::Kind::Literal, t.line);
        e->value = Value::number(std::stod(t.text));
        return e;
      }
      case T::Op:
        if (t.text == "(") {
          ++pos_;
          if (accept_op(")")) return make(Expr::Kind::Tuple, t.line);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ++pos_;
          ExprPtr e = make(Expr::Kind::List, t.line);
          while (!accept_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (accept_op("]")) break;
            e->items.push_back(parse_expression(true));
          }
          return e;
        }
        if (t.text == "{") {
          ++pos_;
          ExprPtr e = make(Expr::Kind::Dict, t.line);
          while (!accept_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (accept_op("}")) break;
            e->items.push_back(parse_expression(true));
            expect_op(":");
            e->items.push_back(parse_expression(true));
          }
          return e;
        }
        break;
      default:
        break;
    }
    error(t.line, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        if (cur().type == T::Int) {
          ExprPtr idx = make(Expr::Kind::Literal, line);
          idx->value = Value::integer(std::stoll(next().text));
          ExprPtr e = make(Expr::Kind::Item, line);
          e->items.push_back(std::move(node));
          e->items.push_back(std::move(idx));
          node = std::move(e);
          continue;
        }
        std::string attr = expect_name();
        if (is_op("(")) {
          if (!is_supported_method(attr)) error(line, "unsupported method '" + attr + "()'");
          ExprPtr e = make(Expr::Kind::MethodCall, line);
          e->name = attr;
          e->items.push_back(std::move(node));
          parse_call_args(*e);
          node = std::move(e);
        } else {
          ExprPtr e = make(Expr::Kind::Attr, line);
          e->name = attr;
          e->items.push_back(std::move(node));
          node = std::move(e);
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    int line = next().line;  // '['
    ExprPtr parts[3];
    bool is_slice = false;
    auto at_part_end = [&]() { return is_op(":") || is_op("]"); };
    if (!at_part_end()) parts[0] = parse_expression(true);
    if (accept_op(":")) {
      is_slice = true;
      if (!at_part_end()) parts[1] = parse_expression(true);
      if (accept_op(":") && !is_op("]")) parts[2] = parse_expression(true);
    }
    expect_op("]");
    if (!is_slice && !parts[0]) error(line, "expected a subscript expression");
    ExprPtr e = make(is_slice ? Expr::Kind::Slice : Expr::Kind::Item, line);
    e->items.push_back(std::move(node));
    if (is_slice) {
      for (auto& p : parts) e->items.push_back(std::move(p));
    } else {
      e->items.push_back(std::move(parts[0]));
    }
    return e;
  }

  ExprPtr parse_call(ExprPtr callee) {
    int line = cur().line;
    if (callee->kind == Expr::Kind::Name) calls_.emplace_back(callee->name, line);
    ExprPtr e = make(Expr::Kind::Call, line);
    e->items.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!accept_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (accept_op(")")) break;
      if (is_op("*") || is_op("**")) error(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().type == T::Name && peek().type == T::Op && peek().text == "=") {
        std::string key = next().text;
        ++pos_;
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error(cur().line, "positional argument follows keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter(ExprPtr node, bool after_pipe = true) {
    int line = after_pipe ? next().line : cur().line;  // '|'
    std::string name = expect_name();
    while (accept_op(".")) name += "." + expect_name();
    FilterFn fn = find_filter(name);
    if (!fn) error(line, "unsupported filter '" + name + "'");
    ExprPtr e = make(Expr::Kind::Filter, line);
    e->name = name;
    e->filter = fn;
    e->items.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = next().line;  // 'is'
    bool negated = accept_name("not");
    std::string name = expect_name();
    while (accept_op(".")) name += "." + expect_name();
    TestFn fn = find_test(name);
    if (!fn) error(line, "unsupported test '" + name + "'");
    ExprPtr e = make(Expr::Kind::Test, line);
    e->name = name;
    e->test = fn;
    e->negated = negated;
    e->items.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int ||
                cur().type == T::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) error(cur().line, "tests cannot be chained with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  // Calls of plain names must reach a global function, a macro or a variable the template assigns.
  void check_calls() const {
    for (const auto& [name, line] : calls_) {
      if (is_global_function(name) || macros_.count(name) || assigned_.count(name)) continue;
      error(line, "call of unknown function '" + name + "'");
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  std::set<std::string> macros_;
  std::set<std::string> assigned_;
  std::vector<std::pair<std::string, int>> calls_;
};

}  // namespace

TemplateAst parse_template(std::string_view source) {
  return Parser(tokenize(source)).parse();
}

}  // namespace dsinfer::jinja
