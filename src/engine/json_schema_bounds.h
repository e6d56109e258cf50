// json_schema_bounds: a number schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum read as exact
// decimals, as the request wrote them (a double prints as its shortest round-trip form, so 0.1 stays 0.1),
// and turned into the magnitudes a number may take on each side of zero (JsonSchema::Magnitudes), which
// JsonSchemaRecognizer compares with the answer's digits as they come; and whether a range of integers holds
// a multiple (multipleOf on integers).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "engine/json_schema.h"

namespace dsinfer::json_schema_bounds {

struct DecimalBound {
  bool negative = false;  // (-0 is 0: not negative)
  JsonSchema::Decimal magnitude;
  bool beyond = false;  // |bound| > kMaxIntegerBound (its magnitude is not filled in)
  bool open = false;    // exclusive
};

// A JSON number's text (-12.5, 3, 1e-05, 1.5e+20) as a bound; throws Error when it has more than
// JsonSchema::kMaxBoundFractionDigits fraction digits.
DecimalBound parse_decimal(const std::string& text);

// -1, 0 or 1.
int compare(const JsonSchema::Decimal& a, const JsonSchema::Decimal& b);
int compare(const DecimalBound& a, const DecimalBound& b);  // as signed values (neither beyond)

// Keeps in `slot` the tighter of it and `b` (the higher lower bound, the lower upper bound; the open one
// where they are equal).
void keep_tighter(std::optional<DecimalBound>& slot, const DecimalBound& b, bool is_lower);

// magnitudes[0]: values written without '-', [1]: with it, from the bounds (either may be absent); false when
// no number lies within them.
// Whether [low, high] holds a multiple of m (m > 0): multipleOf on integers.
bool holds_multiple(int64_t low, int64_t high, int64_t m);

bool fill_magnitudes(const std::optional<DecimalBound>& lower, const std::optional<DecimalBound>& upper,
                     JsonSchema::Magnitudes (&magnitudes)[2]);

}  // namespace dsinfer::json_schema_bounds
