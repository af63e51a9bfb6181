// The SKIPRING_* configuration: the environment parsed and validated through the parameter
// table (runtime/params.h), the process-wide Config.
#include "runtime/config.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/params.h"

extern char** environ;

namespace skipring {
namespace {

std::mutex g_mutex;
Config g_config;

}  // namespace

EnvLookup process_env() {
  return [](const char* name, std::string* value) {
    const char* v = std::getenv(name);
    if (v == nullptr) return false;
    *value = v;
    return true;
  };
}

Status load_config(const EnvLookup& env, Config* out, std::string* error,
                   const std::vector<std::string>* env_names) {
  Config cfg;
  for (const ParamDef& p : param_table()) {
    std::string value;
    // Set but empty (`SKIPRING_X=`) means the default, as if unset (README.md).
    if (!env(p.name, &value) || value.empty()) continue;
    if (!parse_param(p, value, &cfg)) {
      *error = std::string("invalid value '") + value + "' for " + p.name + ": accepts " +
               param_accepts(p);
      return Status::kErrConfig;
    }
  }
  if (env_names != nullptr) {
    for (const auto& n : *env_names) {
      if (n.rfind("SKIPRING_", 0) != 0) continue;
      bool known = false;
      for (const ParamDef& p : param_table()) known = known || n == p.name;
      if (!known) {
        *error = "unknown variable " + n + " (skipring_info lists every SKIPRING_* parameter)";
        return Status::kErrConfig;
      }
    }
  }
  *out = cfg;
  return Status::kOk;
}

std::vector<ParamInfo> describe_params(const Config& cfg, const EnvLookup& env) {
  const Config defaults;
  std::vector<ParamInfo> rows;
  for (const ParamDef& p : param_table()) {
    ParamInfo info;
    info.name = p.name;
    info.type = param_type(p);
    info.accepts = param_accepts(p);
    info.default_value = show_param(p, defaults);
    info.current_value = show_param(p, cfg);
    std::string value;
    info.set_in_env = env(p.name, &value) && !value.empty();
    info.help = p.meaning;
    rows.push_back(std::move(info));
  }
  return rows;
}

std::vector<AgreedValue> agreed_values(const Config& cfg) {
  return agreed_values(cfg, param_table());
}

// No lock: the caller reads through the returned reference anyway, after any lock here would
// have been released. The configuration is written at init and by the skipring_set_* calls,
// which the API documents as not concurrent with collectives. (The lock cost ~10 ns per call,
// several times per all-reduce.)
const Config& global_config() { return g_config; }

Status init_global_config(std::string* error) {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    names.emplace_back(*e, eq ? static_cast<size_t>(eq - *e) : std::strlen(*e));
  }
  Config cfg;
  SKIPRING_RETURN_IF_ERROR(load_config(process_env(), &cfg, error, &names));
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = cfg;
  return Status::kOk;
}

void set_global_config(const Config& cfg) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = cfg;
}

}  // namespace skipring
