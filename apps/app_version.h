// --version for skipring's tools: "<tool> <version>[ (git <describe>)]", the version from
// CMake's project() (<skipring/version.h>) and `git describe` of the source tree at configure
// time (apps/git_describe.h, generated; empty outside a git checkout).
#pragma once

#include <skipring/version.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "apps/git_describe.h"

namespace skipring_apps {

// "skipring_info 0.1.0 (git 67449d5-dirty)"; without the parenthesis outside git.
inline std::string version_text(const char* tool) {
  std::string text = std::string(tool) + " " + SKIPRING_VERSION_STRING;
  if (SKIPRING_GIT_DESCRIBE[0] != '\0') text += std::string(" (git ") + SKIPRING_GIT_DESCRIBE + ")";
  return text;
}

// For the tools that start MPI before they parse their command line (every rank parses it):
// prints the version and returns true when an argument before any "--" is --version, so that
// asking for it needs no MPI launch. Their CLI11 parser has the same --version flag (help).
inline bool print_version_if_asked(int argc, char** argv, const char* tool) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s\n", version_text(tool).c_str());
      return true;
    }
  }
  return false;
}

}  // namespace skipring_apps
