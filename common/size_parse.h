// Byte counts with binary suffixes ("8", "64K", "4MiB", "1gb", "2t"), the one parser of the
// SKIPRING_* sizes and the apps' options. Base layer: no MPI.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace skipring {

// Digits, then an optional case-insensitive suffix: a unit K, M, G or T (powers of 1024),
// optionally followed by 'i', optionally followed by 'B' ("B" alone: bytes). No sign, no
// blanks (see trim_blanks). nullopt on malformed input or when the value overflows 64 bits.
std::optional<uint64_t> parse_size(std::string_view text);

// `text` without leading and trailing blanks (isspace).
std::string_view trim_blanks(std::string_view text);

}  // namespace skipring
