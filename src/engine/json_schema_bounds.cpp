// json_schema_bounds: exact decimal bounds and the magnitudes they allow (see the header).
#include "engine/json_schema_bounds.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace dsinfer::json_schema_bounds {

DecimalBound parse_decimal(const std::string& text) {
  DecimalBound b;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') b.negative = true, ++i;
  std::string digits;  // the mantissa's digits, with the point `point` digits in
  int64_t point = -1;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.')
      point = static_cast<int64_t>(digits.size());
    else
      digits.push_back(text[i]);
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (i < text.size()) point += std::stoll(text.substr(i + 1));  // the exponent (e-05, e+20)
  std::string whole, frac;
  for (int64_t d = std::min<int64_t>(point, 0);
       d < std::max<int64_t>(point, 0) || d < static_cast<int64_t>(digits.size()); ++d) {
    const char c = d >= 0 && d < static_cast<int64_t>(digits.size()) ? digits[static_cast<size_t>(d)] : '0';
    (d < point ? whole : frac).push_back(c);
  }
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
  frac.erase(frac.find_last_not_of('0') + 1);
  if (frac.size() > JsonSchema::kMaxBoundFractionDigits)
    fail(text, " has more than ", JsonSchema::kMaxBoundFractionDigits, " fraction digits");
  if (whole.size() > 18) {
    b.beyond = true;
    return b;
  }
  b.magnitude.whole = whole.empty() ? 0 : std::stoll(whole);
  b.magnitude.frac = frac;
  if (b.magnitude.whole == 0 && frac.empty()) b.negative = false;  // -0 is 0
  return b;
}

int compare(const JsonSchema::Decimal& a, const JsonSchema::Decimal& b) {
  if (a.whole != b.whole) return a.whole < b.whole ? -1 : 1;
  const int c = a.frac.compare(b.frac);  // no trailing zeros: a prefix is the smaller
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

int compare(const DecimalBound& a, const DecimalBound& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = compare(a.magnitude, b.magnitude);
  return a.negative ? -c : c;
}

void keep_tighter(std::optional<DecimalBound>& slot, const DecimalBound& b, bool is_lower) {
  if (!slot) {
    slot = b;
    return;
  }
  const int c = compare(b, *slot);
  if ((is_lower ? c > 0 : c < 0) || (c == 0 && b.open)) slot = b;
}

bool holds_multiple(int64_t low, int64_t high, int64_t m) {
  const int64_t r = low % m;  // (truncated: <= 0 for a negative low)
  const int64_t first = r == 0 ? low : low > 0 ? low + (m - r) : low - r;
  return low <= high && first <= high;
}

bool fill_magnitudes(const std::optional<DecimalBound>& lower, const std::optional<DecimalBound>& upper,
                     JsonSchema::Magnitudes (&magnitudes)[2]) {
  const JsonSchema::Decimal zero;
  // Non-negative values v = M: M >= lower (where lower >= 0) and M <= upper (none where upper < 0).
  JsonSchema::Magnitudes& pos = magnitudes[0];
  if (lower && !lower->negative) pos.low = lower->magnitude, pos.low_open = lower->open;
  if (upper) {
    if (upper->negative) pos.none = true;
    pos.has_high = true, pos.high = upper->magnitude, pos.high_open = upper->open;
  }
  // Negative values v = -M: M >= -upper (where upper <= 0; upper 0 open: M > 0) and M <= -lower (where
  // lower <= 0; none where lower > 0).
  JsonSchema::Magnitudes& neg = magnitudes[1];
  if (upper && (upper->negative || (compare(upper->magnitude, zero) == 0 && upper->open)))
    neg.low = upper->magnitude, neg.low_open = upper->open;
  if (lower) {
    if (!lower->negative && compare(lower->magnitude, zero) > 0) neg.none = true;
    neg.has_high = true, neg.high = lower->magnitude, neg.high_open = lower->open;
  }
  for (JsonSchema::Magnitudes& m : magnitudes) {
    if (m.has_high) {
      const int c = compare(m.low, m.high);
      if (c > 0 || (c == 0 && (m.low_open || m.high_open))) m.none = true;
    }
    m.whole_min = m.low.whole;
    m.whole_max = !m.has_high                          ? JsonSchema::kMaxIntegerBound
                  : m.high_open && m.high.frac.empty() ? m.high.whole - 1
                                                       : m.high.whole;
  }
  return !(magnitudes[0].none && magnitudes[1].none);
}

}  // namespace dsinfer::json_schema_bounds
