#include "collie/rendezvous/env/slurm_nodelist.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

// One number range of a bracket group: [lo, hi] printed at least `width`
// wide (zero-padded).
struct Range {
  uint64_t lo = 0, hi = 0;
  size_t width = 0;
};

// A host expression: literal text and bracket groups, alternating.
struct Part {
  std::string text;           // a literal piece (when ranges is empty)
  std::vector<Range> ranges;  // a bracket group
  uint64_t count() const {
    uint64_t n = 0;
    for (const Range& r : ranges) n += r.hi - r.lo + 1;
    return n;
  }
};

[[noreturn]] void bad(std::string_view list, size_t at, const std::string& why) {
  throw InvalidArgument(str_cat("SLURM node list '", list, "' is malformed at position ", at, ": ",
                                why, " (expected e.g. node[001-004,007],gpu-[1-2])"));
}

uint64_t parse_number(std::string_view list, size_t at, std::string_view digits) {
  uint64_t v = 0;
  if (digits.empty()) bad(list, at, "a number is missing");
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size())
    bad(list, at, str_cat("'", digits, "' is not a number"));
  return v;
}

// Parses the bracket group starting after '[' at `at`; returns the index
// after its ']'.
size_t parse_group(std::string_view list, size_t at, Part& part) {
  const size_t close = list.find(']', at);
  const size_t nested = list.find('[', at);
  if (close == std::string_view::npos) bad(list, at - 1, "'[' is never closed");
  if (nested != std::string_view::npos && nested < close) bad(list, nested, "nested '['");
  std::string_view body = list.substr(at, close - at);
  if (body.empty()) bad(list, at, "empty brackets");
  size_t pos = at;
  while (true) {
    const size_t comma = body.find(',');
    const std::string_view item = body.substr(0, comma);
    const size_t dash = item.find('-');
    Range r;
    const std::string_view lo = item.substr(0, dash);
    r.lo = parse_number(list, pos, lo);
    r.width = lo.size();
    r.hi = r.lo;
    if (dash != std::string_view::npos) {
      r.hi = parse_number(list, pos + dash + 1, item.substr(dash + 1));
      if (r.hi < r.lo) bad(list, pos, str_cat("the range ", item, " runs backwards"));
    }
    part.ranges.push_back(r);
    if (comma == std::string_view::npos) break;
    body.remove_prefix(comma + 1);
    pos += comma + 1;
  }
  return close + 1;
}

// Splits the list into expressions, each into parts.
std::vector<std::vector<Part>> parse(std::string_view list) {
  if (list.empty()) bad(list, 0, "the list is empty");
  std::vector<std::vector<Part>> hosts(1);
  size_t i = 0;
  while (i < list.size()) {
    const char c = list[i];
    if (c == ',') {
      if (hosts.back().empty()) bad(list, i, "an empty host name");
      hosts.emplace_back();
      ++i;
    } else if (c == '[') {
      hosts.back().emplace_back();
      i = parse_group(list, i + 1, hosts.back().back());
    } else if (c == ']') {
      bad(list, i, "']' without '['");
    } else {
      if (hosts.back().empty() || !hosts.back().back().ranges.empty()) hosts.back().emplace_back();
      hosts.back().back().text.push_back(c);
      ++i;
    }
  }
  if (hosts.back().empty()) bad(list, list.size(), "an empty host name");
  return hosts;
}

std::string padded(uint64_t v, size_t width) {
  std::string s = std::to_string(v);
  return s.size() >= width ? s : std::string(width - s.size(), '0') + s;
}

// The k-th host of one expression (the last group varies fastest).
std::string nth(const std::vector<Part>& parts, uint64_t k) {
  std::vector<std::string> pieces(parts.size());
  for (size_t p = parts.size(); p-- > 0;) {
    const Part& part = parts[p];
    if (part.ranges.empty()) {
      pieces[p] = part.text;
      continue;
    }
    uint64_t i = k % part.count();
    k /= part.count();
    for (const Range& r : part.ranges) {
      if (i <= r.hi - r.lo) {
        pieces[p] = padded(r.lo + i, r.width);
        break;
      }
      i -= r.hi - r.lo + 1;
    }
  }
  std::string out;
  for (const auto& s : pieces) out += s;
  return out;
}

// Hosts of one expression, saturating instead of overflowing.
uint64_t count_of(const std::vector<Part>& parts) {
  uint64_t n = 1;
  for (const Part& p : parts) {
    if (p.ranges.empty()) continue;
    const uint64_t c = p.count();
    n = (c != 0 && n > UINT64_MAX / c) ? UINT64_MAX : n * c;
  }
  return n;
}

uint64_t add_saturating(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

std::vector<std::string> expand_nodelist(std::string_view list, size_t max_hosts) {
  const auto hosts = parse(list);
  uint64_t total = 0;
  for (const auto& h : hosts) total = add_saturating(total, count_of(h));
  if (total > max_hosts)
    throw InvalidArgument(str_cat("SLURM node list '", list, "' names ", total,
                                  " hosts, more than the ", max_hosts, " collie expands"));
  std::vector<std::string> out;
  out.reserve(total);
  for (const auto& h : hosts)
    for (uint64_t k = 0, n = count_of(h); k < n; ++k) out.push_back(nth(h, k));
  return out;
}

std::string first_host(std::string_view list) { return nth(parse(list).front(), 0); }

size_t count_hosts(std::string_view list) {
  uint64_t total = 0;
  for (const auto& h : parse(list)) total = add_saturating(total, count_of(h));
  return static_cast<size_t>(std::min<uint64_t>(total, SIZE_MAX));
}

}  // namespace collie
