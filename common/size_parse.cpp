// Byte counts with binary suffixes (size_parse.h).
#include "common/size_parse.h"

#include <cctype>
#include <limits>

namespace skipring {

std::optional<uint64_t> parse_size(std::string_view text) {
  size_t pos = 0;
  uint64_t value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    const uint64_t digit = static_cast<uint64_t>(text[pos] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == 0) return std::nullopt;
  auto next_is = [&](char c) {
    if (pos < text.size() && std::tolower(static_cast<unsigned char>(text[pos])) == c) {
      ++pos;
      return true;
    }
    return false;
  };
  int shift = 0;
  if (next_is('k')) {
    shift = 10;
  } else if (next_is('m')) {
    shift = 20;
  } else if (next_is('g')) {
    shift = 30;
  } else if (next_is('t')) {
    shift = 40;
  }
  if (shift > 0) next_is('i');
  next_is('b');
  if (pos != text.size()) return std::nullopt;
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::string_view trim_blanks(std::string_view text) {
  size_t first = 0;
  size_t last = text.size();
  while (first < last && std::isspace(static_cast<unsigned char>(text[first]))) ++first;
  while (last > first && std::isspace(static_cast<unsigned char>(text[last - 1]))) --last;
  return text.substr(first, last - first);
}

}  // namespace skipring
