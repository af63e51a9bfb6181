// SKIPRING_* registry: defaults, valid values, every invalid value names the variable; the
// parameter table: bounds, texts and the README's Markdown.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <variant>

#include "runtime/config.h"
#include "runtime/params.h"

namespace skipring {
namespace {

EnvLookup fake_env(std::map<std::string, std::string> m) {
  return [m](const char* name, std::string* v) {
    auto it = m.find(name);
    if (it == m.end()) return false;
    *v = it->second;
    return true;
  };
}

TEST(Config, Defaults) {
  Config c;
  std::string err;
  ASSERT_EQ(load_config(fake_env({}), &c, &err), Status::kOk);
  EXPECT_TRUE(c.enable);
  EXPECT_FALSE(c.report);
  EXPECT_EQ(c.segment_bytes, 256u * 1024);
}

TEST(Config, ValidValues) {
  Config c;
  std::string err;
  ASSERT_EQ(load_config(fake_env({{"SKIPRING_ENABLE", "off"},
                                  {"SKIPRING_SEGMENT_BYTES", "64K"},
                                  {"SKIPRING_LOG_LEVEL", "DEBUG"},
                                  {"SKIPRING_PIPELINE_DEPTH", "3"},
                                  {"SKIPRING_CLOCK", "mpi_wtime"},
                                  {"SKIPRING_REPORT", "1"}}),
                        &c, &err),
            Status::kOk)
      << err;
  EXPECT_FALSE(c.enable);
  EXPECT_TRUE(c.report);
  EXPECT_EQ(c.segment_bytes, 64u * 1024);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.pipeline_depth, 3);
  EXPECT_EQ(c.clock, ClockKind::kMpiWtime);
}

TEST(Config, InvalidValuesNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"SKIPRING_ENABLE", "maybe"},     {"SKIPRING_SEGMENT_BYTES", "banana"},
      {"SKIPRING_SEGMENT_BYTES", "12"}, {"SKIPRING_SEGMENT_BYTES", "4T"},
      {"SKIPRING_PIPELINE_DEPTH", "0"}, {"SKIPRING_PIPELINE_DEPTH", "3x"},
      {"SKIPRING_LOG_LEVEL", "loud"},   {"SKIPRING_CLOCK", "sundial"},
      {"SKIPRING_IDLE_SLEEP_US", "-1"}, {"SKIPRING_POLL_SPINS", " "},
  };
  for (const auto& [name, value] : bad) {
    Config c;
    c.pipeline_depth = 99;  // untouched on failure
    std::string err;
    EXPECT_EQ(load_config(fake_env({{name, value}}), &c, &err), Status::kErrConfig)
        << name << "=" << value;
    EXPECT_NE(err.find(name), std::string::npos) << err;
    EXPECT_NE(err.find("accepts"), std::string::npos) << err;
    EXPECT_EQ(c.pipeline_depth, 99);
  }
}

// README.md: an empty value means the default. Every parameter set to "" (alone, and all at
// once) loads, takes its default and does not count as set; a non-empty bad value still fails.
TEST(Config, EmptyValuesMeanTheDefault) {
  const Config defaults;
  std::map<std::string, std::string> all;
  std::vector<std::string> names;
  for (const ParamDef& p : param_table()) {
    Config c;
    std::string err;
    std::vector<std::string> one = {p.name};
    ASSERT_EQ(load_config(fake_env({{p.name, ""}}), &c, &err, &one), Status::kOk)
        << p.name << "=: " << err;
    EXPECT_EQ(show_param(p, c), show_param(p, defaults)) << p.name;
    all[p.name] = "";
    names.push_back(p.name);
  }
  Config c;
  c.pipeline_depth = 99;
  std::string err;
  ASSERT_EQ(load_config(fake_env(all), &c, &err, &names), Status::kOk) << err;
  for (const ParamDef& p : param_table()) EXPECT_EQ(show_param(p, c), show_param(p, defaults));
  for (const ParamInfo& row : describe_params(c, fake_env(all))) {
    EXPECT_FALSE(row.set_in_env) << row.name;
  }
  // An unknown SKIPRING_* name is still reported, empty or not.
  names.push_back("SKIPRING_NO_SUCH_VARIABLE");
  EXPECT_EQ(load_config(fake_env(all), &c, &err, &names), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_NO_SUCH_VARIABLE"), std::string::npos) << err;
}

// The same through the process environment and init_global_config (what skipring_init runs):
// SKIPRING_HOST_MAP= and SKIPRING_TRACE= used to abort init.
TEST(Config, EmptyEnvironmentValuesInitWithDefaults) {
  const Config defaults;
  std::vector<std::pair<std::string, std::string>> saved;  // variables set before the test
  for (const ParamDef& p : param_table()) {
    if (const char* v = std::getenv(p.name)) saved.emplace_back(p.name, v);
  }
  for (const ParamDef& p : param_table()) {
    ASSERT_EQ(setenv(p.name, "", 1), 0);
    std::string err;
    EXPECT_EQ(init_global_config(&err), Status::kOk) << p.name << "=: " << err;
    EXPECT_EQ(show_param(p, global_config()), show_param(p, defaults)) << p.name;
    ASSERT_EQ(unsetenv(p.name), 0);
  }
  for (const ParamDef& p : param_table()) ASSERT_EQ(setenv(p.name, "", 1), 0);
  std::string err;
  EXPECT_EQ(init_global_config(&err), Status::kOk) << "every SKIPRING_* empty: " << err;
  EXPECT_EQ(global_config().host_map, "");
  EXPECT_EQ(global_config().trace_dir, "");
  EXPECT_EQ(global_config().segment_bytes, defaults.segment_bytes);
  for (const ParamDef& p : param_table()) unsetenv(p.name);
  for (const auto& [name, value] : saved) setenv(name.c_str(), value.c_str(), 1);
  ASSERT_EQ(init_global_config(&err), Status::kOk) << err;
}

TEST(Config, UnknownVariableRejected) {
  Config c;
  std::string err;
  std::vector<std::string> names = {"PATH", "SKIPRING_SEGMNT_BYTES"};
  EXPECT_EQ(load_config(fake_env({}), &c, &err, &names), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_SEGMNT_BYTES"), std::string::npos);
}

// The unit tests' own knobs (test_skip_ahead.cpp: SR_TEST_SCHEDULES, SR_TEST_SCHEDULE,
// SR_TEST_VERBOSE) are outside the SKIPRING_ prefix: exported while an MPI program runs, they do
// not make init fail as unknown SKIPRING_ variables.
TEST(Config, TestKnobsAreNotSkipringVariables) {
  Config c;
  std::string err;
  std::vector<std::string> names = {"SR_TEST_SCHEDULES", "SR_TEST_SCHEDULE", "SR_TEST_VERBOSE"};
  EXPECT_EQ(load_config(fake_env({}), &c, &err, &names), Status::kOk) << err;
}

TEST(Config, DescribeListsEveryParameter) {
  Config c;
  c.segment_bytes = 4096;
  auto rows = describe_params(c, fake_env({{"SKIPRING_SEGMENT_BYTES", "4K"}}));
  ASSERT_GE(rows.size(), 9u);
  bool found = false;
  for (const auto& r : rows) {
    EXPECT_EQ(r.name.rfind("SKIPRING_", 0), 0u);
    EXPECT_FALSE(r.help.empty());
    if (r.name == "SKIPRING_SEGMENT_BYTES") {
      found = true;
      EXPECT_EQ(r.current_value, "4096");
      EXPECT_TRUE(r.set_in_env);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace skipring

namespace skipring {
namespace {

// The issue-5 parameters: algorithm, host map, tree graph, multitree K, cost-model overrides.
TEST(Config, AlgorithmAndTopologyParameters) {
  Config c;
  std::string err;
  ASSERT_EQ(load_config(fake_env({}), &c, &err), Status::kOk);
  EXPECT_EQ(c.algo, Algo::kAuto);
  EXPECT_TRUE(c.host_map.empty());
  EXPECT_EQ(c.multitree_k, 4);
  EXPECT_DOUBLE_EQ(c.auto_straggler, 1.5);
  ASSERT_EQ(load_config(fake_env({{"SKIPRING_ALGO", "Rabenseifner"},
                                  {"SKIPRING_HOST_MAP", "a,b,a,b"},
                                  {"SKIPRING_MULTITREE_K", "2"},
                                  {"SKIPRING_MODEL_LAT_US", "1.5"},
                                  {"SKIPRING_MODEL_GBPS", "12.5"},
                                  {"SKIPRING_MODEL_REDUCE_GBPS", "30"},
                                  {"SKIPRING_AUTO_STRAGGLER", "0"}}),
                        &c, &err),
            Status::kOk)
      << err;
  EXPECT_EQ(c.algo, Algo::kRabenseifner);
  EXPECT_EQ(c.host_map, "a,b,a,b");
  EXPECT_EQ(c.multitree_k, 2);
  EXPECT_DOUBLE_EQ(c.model_lat_us, 1.5);
  EXPECT_DOUBLE_EQ(c.model_gbps, 12.5);
  EXPECT_DOUBLE_EQ(c.model_reduce_gbps, 30);
  EXPECT_DOUBLE_EQ(c.auto_straggler, 0);
  ASSERT_EQ(load_config(fake_env({{"SKIPRING_HOST_MAP", "block:4"}}), &c, &err), Status::kOk);
  EXPECT_EQ(c.host_map, "block:4");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"SKIPRING_ALGO", "fastest"},
      {"SKIPRING_ALGO", " "},
      {"SKIPRING_HOST_MAP", "a,,b"},
      {"SKIPRING_HOST_MAP", "block:0"},
      {"SKIPRING_HOST_MAP", "block:x"},
      {"SKIPRING_HOST_MAP", ","},
      {"SKIPRING_TREE_GRAPH", "/nonexistent/graph.txt"},
      {"SKIPRING_MULTITREE_K", "0"},
      {"SKIPRING_MULTITREE_K", "17"},
      {"SKIPRING_MODEL_LAT_US", "-1"},
      {"SKIPRING_MODEL_GBPS", "fast"},
      {"SKIPRING_MODEL_REDUCE_GBPS", "1e9"},
      {"SKIPRING_AUTO_STRAGGLER", "-1"},
      {"SKIPRING_AUTO_STRAGGLER", "101"},
      {"SKIPRING_AUTO_STRAGGLER", "yes"},
  };
  for (const auto& [name, value] : bad) {
    Config d;
    EXPECT_EQ(load_config(fake_env({{name, value}}), &d, &err), Status::kErrConfig)
        << name << "=" << value;
    EXPECT_NE(err.find(name), std::string::npos) << err;
  }
}

// Skip-ahead's allgather after a straggler: auto (one host: direct), 0, 1.
TEST(Config, DirectAllgather) {
  Config c;
  std::string err;
  ASSERT_EQ(load_config(fake_env({}), &c, &err), Status::kOk);
  EXPECT_EQ(c.direct_allgather, -1);
  for (const auto& [value, want] :
       std::vector<std::pair<std::string, int>>{{"auto", -1}, {"0", 0}, {"1", 1}}) {
    ASSERT_EQ(load_config(fake_env({{"SKIPRING_DIRECT_ALLGATHER", value}}), &c, &err), Status::kOk)
        << err;
    EXPECT_EQ(c.direct_allgather, want) << value;
  }
  for (const std::string bad : {"2", "yes please", " ", "direct"}) {
    Config d;
    EXPECT_EQ(load_config(fake_env({{"SKIPRING_DIRECT_ALLGATHER", bad}}), &d, &err),
              Status::kErrConfig)
        << bad;
    EXPECT_NE(err.find("SKIPRING_DIRECT_ALLGATHER"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace skipring

namespace skipring {
namespace {

bool is_numeric(const ParamDef& def) {
  return !std::holds_alternative<bool Config::*>(def.target) &&
         !std::holds_alternative<CustomParam>(def.target);
}

// A value of the parameter's kind as text: integers without a fraction.
std::string number_text(const ParamDef& def, double v) {
  if (std::holds_alternative<double Config::*>(def.target)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return buf;
  }
  return std::to_string(static_cast<long long>(v));
}

// The parser applies exactly the bounds the "accepts" text is made from: both ends accepted
// (the low one unless open), one step beyond either end refused, for every numeric parameter.
TEST(ParamTable, ParserEnforcesTheDocumentedBounds) {
  int numeric = 0;
  for (const ParamDef& def : param_table()) {
    if (!is_numeric(def)) continue;
    ++numeric;
    const ParamBounds& b = def.bounds;
    const bool integral = !std::holds_alternative<double Config::*>(def.target);
    const double below = integral ? b.lo - 1 : std::nextafter(b.lo, -INFINITY);
    const double above = integral ? b.hi + 1 : std::nextafter(b.hi, INFINITY);
    Config c;
    EXPECT_EQ(parse_param(def, number_text(def, b.lo), &c), !b.lo_open) << def.name;
    EXPECT_TRUE(parse_param(def, number_text(def, b.hi), &c)) << def.name;
    EXPECT_FALSE(parse_param(def, number_text(def, below), &c)) << def.name << " below";
    EXPECT_FALSE(parse_param(def, number_text(def, above), &c)) << def.name << " above";
  }
  EXPECT_GE(numeric, 10);
}

// The texts follow the bounds (the README shows them; load_config's errors quote them).
TEST(ParamTable, AcceptsTextComesFromTheBounds) {
  std::map<std::string, std::string> accepts;
  for (const ParamDef& def : param_table()) accepts[def.name] = param_accepts(def);
  EXPECT_EQ(accepts["SKIPRING_PIPELINE_DEPTH"], "1..64");
  EXPECT_EQ(accepts["SKIPRING_SEGMENT_BYTES"], "1K..1G, K/M/G suffix");
  EXPECT_EQ(accepts["SKIPRING_ALPHA"], "a number > 1 and <= 1000");
  EXPECT_EQ(accepts["SKIPRING_MODEL_GBPS"], "a number >= 0 and <= 1e6");
  Config c;
  std::string err;
  EXPECT_EQ(load_config(fake_env({{"SKIPRING_PIPELINE_DEPTH", "65"}}), &c, &err),
            Status::kErrConfig);
  EXPECT_NE(err.find("accepts 1..64"), std::string::npos) << err;
}

// Every default (Config's initializers) lies within its documented bounds, and the
// documented default text is what the parser reads back as that default.
TEST(ParamTable, DefaultsAreAcceptedValues) {
  const Config defaults;
  for (const ParamDef& def : param_table()) {
    if (std::holds_alternative<CustomParam>(def.target)) continue;
    Config c;
    const std::string text = param_default_text(def);
    const std::string value = text.substr(0, text.find(' '));
    ASSERT_TRUE(parse_param(def, value, &c)) << def.name << " default '" << value << "'";
    EXPECT_EQ(show_param(def, c), show_param(def, defaults)) << def.name;
  }
}

// One Markdown row of five cells per parameter of the group, and none of the other group.
TEST(ParamTable, MarkdownHasOneRowPerParameter) {
  for (const ParamGroup group : {ParamGroup::kGeneral, ParamGroup::kSimGrid}) {
    const std::string md = params_markdown(group);
    for (const ParamDef& def : param_table()) {
      const bool listed = md.find("| `" + std::string(def.name) + "` |") != std::string::npos;
      EXPECT_EQ(listed, def.group == group) << def.name;
    }
    size_t start = 0;
    int rows = 0;
    while (start < md.size()) {
      const size_t end = md.find('\n', start);
      ASSERT_NE(end, std::string::npos) << "the table ends with a newline";
      const std::string line = md.substr(start, end - start);
      int bars = 0;
      for (size_t i = 0; i < line.size(); ++i)
        bars += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
      EXPECT_EQ(bars, 6) << line;
      ++rows;
      start = end + 1;
    }
    int expected_rows = 2;  // header and separator
    for (const ParamDef& def : param_table()) expected_rows += def.group == group ? 1 : 0;
    EXPECT_EQ(rows, expected_rows);
  }
}

}  // namespace
}  // namespace skipring
