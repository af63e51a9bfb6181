// Small text helpers shared by the parameter parsers and the tools.
#pragma once

#include <cctype>
#include <string>

namespace skipring {

// ASCII lower case (parameter values and option names are ASCII).
inline std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace skipring
