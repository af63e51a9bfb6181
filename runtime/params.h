// The SKIPRING_* parameter table: one entry per variable with the Config field it sets, the
// values it accepts (numeric bounds the parser applies and the "accepts" text is made from),
// its default (the Config member's initializer, shown through the entry) and its meaning.
// load_config parses the environment through it, skipring_info prints it, and README.md's
// tables are its Markdown (skipring_info --markdown; the readme_params test compares them).
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "runtime/config.h"

namespace skipring {

// Bounds of a numeric parameter: [lo, hi], or (lo, hi] when lo_open.
struct ParamBounds {
  double lo = 0;
  double hi = 0;
  bool lo_open = false;
};

// A parameter with its own parser (enums, labels, paths, specs).
struct CustomParam {
  const char* type;     // "enum", "string", "path", "spec"
  const char* accepts;  // what the parser accepts
  bool (*parse)(const std::string& text, Config* cfg);
  std::string (*show)(const Config& cfg);
};

// The field a parameter sets: a bool (0/1), an int, a byte size, a double, or CustomParam.
using ParamTarget =
    std::variant<bool Config::*, int Config::*, size_t Config::*, double Config::*, CustomParam>;

// Which README table lists the parameter.
enum class ParamGroup {
  kGeneral,  // every build
  kSimGrid,  // read by the SimGrid SMPI build only (validated and ignored by the others)
};

struct ParamDef {
  const char* name;  // e.g. "SKIPRING_SEGMENT_BYTES"
  ParamTarget target;
  ParamBounds bounds;        // int, size and double targets
  const char* default_note;  // after the default; "" for none
  const char* meaning;       // one line; Markdown (`code`) allowed
  ParamGroup group = ParamGroup::kGeneral;
};

// Every parameter, in the order the environment is checked and skipring_info lists them.
const std::vector<ParamDef>& param_table();

// Parses `text` into the field of `def` in *cfg; false (cfg untouched) when not accepted.
bool parse_param(const ParamDef& def, const std::string& text, Config* cfg);
// The field's value in cfg, as the parser accepts it back.
std::string show_param(const ParamDef& def, const Config& cfg);
// "bool", "int", "size", "double" or the custom type.
std::string param_type(const ParamDef& def);
// What the parser accepts, e.g. "1..64" (made from the bounds for numeric parameters).
std::string param_accepts(const ParamDef& def);
// The default for documentation: sizes with a K/M/G suffix, then the default note.
std::string param_default_text(const ParamDef& def);

// The README table of one group: a header row, then one row per parameter
// (variable | default | accepts | meaning), each line ending in '\n'.
std::string params_markdown(ParamGroup group);

}  // namespace skipring
