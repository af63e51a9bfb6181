// SKIPRING_* registry: defaults, valid values, every invalid value names the variable.
#include <gtest/gtest.h>

#include <map>

#include "runtime/config.h"

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
      {"SKIPRING_ENABLE", "maybe"},        {"SKIPRING_SEGMENT_BYTES", "banana"},
      {"SKIPRING_SEGMENT_BYTES", "12"},    {"SKIPRING_SEGMENT_BYTES", "4T"},
      {"SKIPRING_PIPELINE_DEPTH", "0"},    {"SKIPRING_PIPELINE_DEPTH", "3x"},
      {"SKIPRING_LOG_LEVEL", "loud"},      {"SKIPRING_CLOCK", "sundial"},
      {"SKIPRING_IDLE_SLEEP_US", "-1"},    {"SKIPRING_POLL_SPINS", ""},
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

TEST(Config, UnknownVariableRejected) {
  Config c;
  std::string err;
  std::vector<std::string> names = {"PATH", "SKIPRING_SEGMNT_BYTES"};
  EXPECT_EQ(load_config(fake_env({}), &c, &err, &names), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_SEGMNT_BYTES"), std::string::npos);
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
  ASSERT_EQ(load_config(fake_env({{"SKIPRING_ALGO", "Rabenseifner"},
                                  {"SKIPRING_HOST_MAP", "a,b,a,b"},
                                  {"SKIPRING_MULTITREE_K", "2"},
                                  {"SKIPRING_MODEL_LAT_US", "1.5"},
                                  {"SKIPRING_MODEL_GBPS", "12.5"},
                                  {"SKIPRING_MODEL_REDUCE_GBPS", "30"}}),
                        &c, &err),
            Status::kOk)
      << err;
  EXPECT_EQ(c.algo, Algo::kRabenseifner);
  EXPECT_EQ(c.host_map, "a,b,a,b");
  EXPECT_EQ(c.multitree_k, 2);
  EXPECT_DOUBLE_EQ(c.model_lat_us, 1.5);
  EXPECT_DOUBLE_EQ(c.model_gbps, 12.5);
  EXPECT_DOUBLE_EQ(c.model_reduce_gbps, 30);
  ASSERT_EQ(load_config(fake_env({{"SKIPRING_HOST_MAP", "block:4"}}), &c, &err), Status::kOk);
  EXPECT_EQ(c.host_map, "block:4");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"SKIPRING_ALGO", "fastest"},          {"SKIPRING_ALGO", ""},
      {"SKIPRING_HOST_MAP", "a,,b"},         {"SKIPRING_HOST_MAP", "block:0"},
      {"SKIPRING_HOST_MAP", "block:x"},      {"SKIPRING_HOST_MAP", ","},
      {"SKIPRING_TREE_GRAPH", "/nonexistent/graph.txt"},
      {"SKIPRING_MULTITREE_K", "0"},         {"SKIPRING_MULTITREE_K", "17"},
      {"SKIPRING_MODEL_LAT_US", "-1"},       {"SKIPRING_MODEL_GBPS", "fast"},
      {"SKIPRING_MODEL_REDUCE_GBPS", "1e9"},
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
    ASSERT_EQ(load_config(fake_env({{"SKIPRING_DIRECT_ALLGATHER", value}}), &c, &err),
              Status::kOk)
        << err;
    EXPECT_EQ(c.direct_allgather, want) << value;
  }
  for (const std::string bad : {"2", "yes please", "", "direct"}) {
    Config d;
    EXPECT_EQ(load_config(fake_env({{"SKIPRING_DIRECT_ALLGATHER", bad}}), &d, &err),
              Status::kErrConfig)
        << bad;
    EXPECT_NE(err.find("SKIPRING_DIRECT_ALLGATHER"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace skipring
