// The SKIPRING_* parameter table: one entry per variable with whether the ranks must agree on
// it, the Config field it sets, the values it accepts (numeric bounds the parser applies and the
// "accepts" text is made from), its default (the Config member's initializer, shown through the
// entry) and its meaning. load_config parses the environment through it, communicator setup
// compares the agreed ones across ranks (agreed_values), skipring_info prints it, and
// README.md's tables are its Markdown (skipring_info --markdown; the readme_params test
// compares them).
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
  // Appends the parsed field's bytes (agreed parameters: the communicator cache's key, see
  // param_key); nullptr: show()'s text is appended instead (correct, but formats on every
  // communicator setup).
  void (*key)(const Config& cfg, std::string* out) = nullptr;
};

// The field a parameter sets: a bool (0/1), an int, a byte size, a double, or CustomParam.
using ParamTarget =
    std::variant<bool Config::*, int Config::*, size_t Config::*, double Config::*, CustomParam>;

// Which README table lists the parameter.
enum class ParamGroup {
  kGeneral,  // every build
  kSimGrid,  // read by the SimGrid SMPI build only (validated and ignored by the others)
};

// Whether the ranks of a communicator must share a parameter, and what of it. Communicator
// setup compares the agreed ones in one all-reduce (agreed_values, runtime/config.h) and fails
// on every rank, naming the variable and who holds what, when they differ. A parameter the
// protocol, the algorithm choice or whether a collective step runs depends on is agreed; one
// that only changes this rank's behaviour (logging, polling, the clock, tracing) is local.
enum class ParamAgree {
  kLocal,         // may differ between ranks
  kValue,         // the value, as parsed
  kWhetherGiven,  // only whether it is given (non-zero) or derived at run time (0)
  kFileContents,  // a path: the contents of the file, not the path
};

struct ParamDef {
  const char* name;  // e.g. "SKIPRING_SEGMENT_BYTES"
  ParamAgree agree;  // whether (and what of it) the ranks must agree on
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

// For documentation: "must agree", "may differ", ... (from def.agree, whatever the build).
std::string param_agree_text(const ParamDef& def);

// Whether this build's communicator setup compares `def` across ranks: def.agree is not kLocal
// and the build reads the parameter (a kSimGrid one only in the SimGrid build).
bool param_agreed(const ParamDef& def);
// Appends what identifies the agreed part of def's value in cfg, without formatting or file
// reading: the field's bytes (kValue), one byte for non-zero (kWhetherGiven), the path
// (kFileContents), with lengths so no two values give the same bytes.
void param_key(const ParamDef& def, const Config& cfg, std::string* out);
// The key of every agreed parameter of `table` in cfg (param_key in table order): the same
// key, the same agreed_values. agreed_values caches on it (communicators are set up often).
std::string agreed_fingerprint(const Config& cfg, const std::vector<ParamDef>& table);
// agreed_values (runtime/config.h) over `table` (tests build their own); one entry per agreed
// parameter, in table order.
std::vector<AgreedValue> agreed_values(const Config& cfg, const std::vector<ParamDef>& table);

// The README table of one group: a header row, then one row per parameter
// (variable | default | accepts | ranks | meaning), each line ending in '\n'.
std::string params_markdown(ParamGroup group);

}  // namespace skipring
