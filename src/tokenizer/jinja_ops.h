// Python operator semantics for template values: arithmetic, comparison, membership, attribute and item
// access, slicing.
#pragma once
#include <string>

#include "tokenizer/jinja_value.h"

namespace dsinfer::jinja {

// Arithmetic and string operators: + - * / // % ** ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);
bool values_equal(const Value& a, const Value& b);
// Comparisons: == != < <= > >= in "not in".
bool compare(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// obj.name (Jinja getattr: attribute, then item); fails for undefined obj.
Value get_attr(const Value& obj, const std::string& name);
// obj[key] (Jinja getitem: item, then attribute); fails for undefined obj.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on lists and strings; undefined bounds are omitted.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Fails with Jinja's UndefinedError message when v is undefined.
void require_defined(const Value& v);

}  // namespace dsinfer::jinja
