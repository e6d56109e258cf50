// Jinja syntax tree: expression and statement nodes produced by the parser and walked by the
// evaluator. Filters and tests are resolved to functions at parse time.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace dsinfer::jinja {

using FilterFn = Value (*)(const Value& input, const CallArgs& args);
using TestFn = bool (*)(const Value& input, const CallArgs& args);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,     // value
    Name,        // name
    List,        // items
    Tuple,       // items (rendered like a list)
    Dict,        // items: key0, value0, key1, value1, ...
    Attr,        // items[0].name
    Item,        // items[0][items[1]]
    Slice,       // items[0][items[1]:items[2]:items[3]] (null entries are omitted bounds)
    Call,        // items[0](args)
    MethodCall,  // items[0].name(args)
    Filter,      // items[0] | name(args)
    Test,        // items[0] is [not] name(args)
    Unary,       // name (op: "-", "+", "not") items[0]
    Binary,      // items[0] name items[1] (arithmetic, "~", "and", "or")
    Compare,     // items[0] ops[0] items[1] ops[1] items[2] ... (chained comparisons)
    Conditional  // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  // Call arguments (Call, MethodCall, Filter, Test).
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
  bool negated = false;  // "is not"
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

// Assignment target: a name, a namespace attribute (name.attr) or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  std::string attr;                // non-empty: names[0].attr on a namespace
  bool tuple = false;
};

struct Node {
  enum class Kind {
    Text,    // text
    Output,  // {{ expr }}
    If,      // conds[i] -> bodies[i]; else_body when no branch matches
    For,     // for target in expr [if cond]: bodies[0]; else_body when no iteration ran
    Set,     // set target = expr, or block set (bodies[0] rendered) when expr is null
    Macro,   // macro name(params) bodies[0]
    Break,
    Continue,
    FilterBlock,  // filter chain (expr with a Filter chain whose innermost input is a placeholder)
    With,         // with assignments: bodies[0] in a new scope
    Scope         // transparent block (transformers' {% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  std::vector<ExprPtr> conds;
  std::vector<NodeList> bodies;
  NodeList else_body;
  // Macro parameters (name, default or null) and With assignments (name, value).
  std::vector<std::pair<std::string, ExprPtr>> params;
};

struct TemplateAst {
  NodeList body;
};

}  // namespace dsinfer::jinja
