// Jinja evaluator (see jinja_eval.h). Scoping follows Jinja: each for-loop iteration, macro call and
// with-block gets its own scope, so {% set %} inside them does not leak out (namespaces are the way out).
#include "tokenizer/jinja_eval.h"

#include "core/error.h"
#include "tokenizer/jinja_globals.h"
#include "tokenizer/jinja_methods.h"
#include "tokenizer/jinja_ops.h"

namespace dsinfer::jinja {
namespace {

// An error already carrying its template line.
class LocatedError : public Error {
 public:
  using Error::Error;
};

class Renderer {
 public:
  explicit Renderer(Dict globals) { scopes_.push_back(std::move(globals)); }

  std::string run(const NodeList& body) {
    std::string out;
    exec_list(body, out);
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_list(const NodeList& nodes, std::string& out) {
    for (const NodePtr& n : nodes) {
      Flow f = exec(*n, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, std::string& out) {
    try {
      return exec_node(n, out);
    } catch (const LocatedError&) {
      throw;
    } catch (const TemplateRaisedError&) {
      throw;
    } catch (const Error& e) {
      throw LocatedError(str_cat("chat template line ", n.line, ": ", e.what()));
    }
  }

  Flow exec_node(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::Text:
        out += n.text;
        return Flow::Normal;
      case Node::Kind::Output:
        out += eval(*n.expr).str();
        return Flow::Normal;
      case Node::Kind::If:
        for (size_t i = 0; i < n.conds.size(); ++i)
          if (eval(*n.conds[i]).truthy()) return exec_list(n.bodies[i], out);
        return exec_list(n.else_body, out);
      case Node::Kind::For:
        return exec_for(n, out);
      case Node::Kind::Set:
        if (n.expr) {
          assign(n.target, eval(*n.expr));
        } else {
          std::string body;
          exec_scoped(n.bodies[0], body);
          assign(n.target, Value::string(std::move(body)));
        }
        return Flow::Normal;
      case Node::Kind::Macro:
        scopes_.back().set(n.text, make_macro(n));
        return Flow::Normal;
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
      case Node::Kind::FilterBlock: {
        std::string body;
        exec_scoped(n.bodies[0], body);
        out += apply_filter_chain(*n.expr, Value::string(std::move(body))).str();
        return Flow::Normal;
      }
      case Node::Kind::With: {
        Dict frame;
        for (const auto& [name, expr] : n.params) frame.set(name, eval(*expr));
        scopes_.push_back(std::move(frame));
        Flow f = exec_list(n.bodies[0], out);
        scopes_.pop_back();
        return f;
      }
      case Node::Kind::Scope:
        return exec_list(n.bodies[0], out);
    }
    return Flow::Normal;
  }

  // Renders nodes in their own scope; break/continue cannot cross it.
  void exec_scoped(const NodeList& nodes, std::string& out) {
    scopes_.emplace_back();
    exec_list(nodes, out);
    scopes_.pop_back();
  }

  Flow exec_for(const Node& n, std::string& out) {
    Value iterable = eval(*n.expr);
    List items = iterable.iterate();
    if (n.cond) {
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        bind(n.target, item);
        bool keep = eval(*n.cond).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_list(n.else_body, out);
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      Dict loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(length - i));
      loop.set("revindex0", Value::integer(length - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == length - 1));
      loop.set("length", Value::integer(length));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < length) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
      Dict frame;
      frame.set("loop", Value::dict(std::move(loop)));
      scopes_.push_back(std::move(frame));
      bind(n.target, items[static_cast<size_t>(i)]);
      Flow f = exec_list(n.bodies[0], out);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // Binds loop/set targets in the innermost scope, unpacking tuples.
  void bind(const Target& t, const Value& v) {
    if (!t.tuple) {
      scopes_.back().set(t.names[0], v);
      return;
    }
    List parts = v.iterate();
    DSI_CHECK(parts.size() == t.names.size(), parts.size() < t.names.size() ? "not enough" : "too many",
              " values to unpack (expected ", t.names.size(), ", got ", parts.size(), ")");
    for (size_t i = 0; i < parts.size(); ++i) scopes_.back().set(t.names[i], parts[i]);
  }

  void assign(const Target& t, const Value& v) {
    if (t.attr.empty()) {
      bind(t, v);
      return;
    }
    Value ns = lookup(t.names[0]);
    DSI_CHECK(ns.is_namespace(), "cannot assign attribute '", t.attr, "' on '", t.names[0],
              "': it is not a namespace");
    ns.namespace_attrs().set(t.attr, v);
  }

  Value lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > floor_ && i > 0;)
      if (const Value* v = scopes_[i].find(name)) return *v;
    if (const Value* v = scopes_[0].find(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::callable(n.text, [this, node](const CallArgs& args) { return call_macro(*node, args); });
  }

  Value call_macro(const Node& n, const CallArgs& args) {
    DSI_CHECK(args.positional.size() <= n.params.size(), "macro '", n.text, "' takes at most ",
              n.params.size(), " arguments (", args.positional.size(), " given)");
    for (const auto& kv : args.keyword) {
      bool known = false;
      for (const auto& p : n.params) known = known || p.first == kv.first;
      DSI_CHECK(known, "macro '", n.text, "' got an unexpected keyword argument '", kv.first, "'");
    }
    size_t saved_floor = floor_;
    scopes_.emplace_back();
    floor_ = scopes_.size() - 1;
    for (size_t i = 0; i < n.params.size(); ++i) {
      const auto& [name, def] = n.params[i];
      Value v = args.get(i, name);
      if (!args.has(i, name) && def) v = eval(*def);
      if (v.is_undefined() && !args.has(i, name)) v = Value::undefined("'" + name + "' is undefined");
      scopes_.back().set(name, v);
    }
    std::string out;
    try {
      exec_list(n.bodies[0], out);
    } catch (...) {
      scopes_.pop_back();
      floor_ = saved_floor;
      throw;
    }
    scopes_.pop_back();
    floor_ = saved_floor;
    return Value::string(std::move(out));
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs a;
    for (const ExprPtr& arg : e.args) a.positional.push_back(eval(*arg));
    for (const auto& [k, arg] : e.kwargs) a.keyword.emplace_back(k, eval(*arg));
    return a;
  }

  // Applies a {% filter %} chain to the rendered body (the chain's innermost input is a placeholder).
  Value apply_filter_chain(const Expr& e, const Value& input) {
    Value v = e.items[0]->kind == Expr::Kind::Filter ? apply_filter_chain(*e.items[0], input) : input;
    return e.filter(v, eval_args(e));
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const ExprPtr& item : e.items) items.push_back(eval(*item));
        return e.kind == Expr::Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Kind::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value key = eval(*e.items[i]);
          DSI_CHECK(key.is_string(), "dict literal keys must be strings, got ", key.type_name());
          d.set(key.as_string(), eval(*e.items[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*e.items[0]), e.name);
      case Expr::Kind::Item:
        return get_item(eval(*e.items[0]), eval(*e.items[1]));
      case Expr::Kind::Slice: {
        auto opt = [&](const ExprPtr& p) { return p ? eval(*p) : Value(); };
        return slice(eval(*e.items[0]), opt(e.items[1]), opt(e.items[2]), opt(e.items[3]));
      }
      case Expr::Kind::Call: {
        Value callee = eval(*e.items[0]);
        require_defined(callee);
        DSI_CHECK(callee.is_callable(), "'", callee.type_name(), "' object is not callable");
        return callee.as_function()(eval_args(e));
      }
      case Expr::Kind::MethodCall: {
        Value obj = eval(*e.items[0]);
        return call_method(obj, e.name, eval_args(e));
      }
      case Expr::Kind::Filter:
        return e.filter(eval(*e.items[0]), eval_args(e));
      case Expr::Kind::Test:
        return Value::boolean(e.test(eval(*e.items[0]), eval_args(e)) != e.negated);
      case Expr::Kind::Unary:
        return unary_op(e.name, eval(*e.items[0]));
      case Expr::Kind::Binary: {
        if (e.name == "and") {
          Value a = eval(*e.items[0]);
          return a.truthy() ? eval(*e.items[1]) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.items[0]);
          return a.truthy() ? a : eval(*e.items[1]);
        }
        Value a = eval(*e.items[0]);
        return binary_op(e.name, a, eval(*e.items[1]));
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.items[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::Conditional:
        if (eval(*e.items[1]).truthy()) return eval(*e.items[0]);
        return e.items[2] ? eval(*e.items[2]) : Value::undefined("conditional expression has no else branch");
    }
    fail("unknown expression kind");
  }

  std::vector<Dict> scopes_;  // scopes_[0] holds the globals
  size_t floor_ = 0;          // lowest scope visible besides the globals (raised inside macro calls)
};

}  // namespace

std::string render(const TemplateAst& ast, Dict globals) {
  add_global_functions(globals);
  return Renderer(std::move(globals)).run(ast.body);
}

}  // namespace dsinfer::jinja
