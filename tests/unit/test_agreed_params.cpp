// Which SKIPRING_* parameters the ranks must agree on (ParamDef::agree, runtime/params.h): the
// agreed values and the communicator cache's fingerprint both follow the table, for the real
// table and for a test table with parameters added; every agreed parameter's change reaches
// its digest and the fingerprint, a local one's reaches neither.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "runtime/config.h"
#include "runtime/params.h"

namespace skipring {
namespace {

std::map<std::string, int64_t> digests(const std::vector<AgreedValue>& values) {
  std::map<std::string, int64_t> out;
  for (const AgreedValue& v : values) out[v.name] = v.digest;
  return out;
}

const ParamDef& find_param(const char* name) {
  for (const ParamDef& def : param_table()) {
    if (std::string(def.name) == name) return def;
  }
  ADD_FAILURE() << "no parameter " << name;
  return param_table().front();
}

// Text of another accepted value than cfg's for a bool or numeric parameter ("" for others):
// the upper bound, or the lower one where cfg already holds the upper.
std::string other_value(const ParamDef& def, const Config& cfg) {
  const ParamTarget& t = def.target;
  if (std::holds_alternative<CustomParam>(t)) return "";
  if (std::holds_alternative<bool Config::*>(t)) return show_param(def, cfg) == "1" ? "0" : "1";
  const bool is_double = std::holds_alternative<double Config::*>(t);
  auto text = [&](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), is_double ? "%.17g" : "%.0f", v);
    return std::string(buf);
  };
  Config probe = cfg;
  EXPECT_TRUE(parse_param(def, text(def.bounds.hi), &probe)) << def.name;
  if (show_param(def, probe) != show_param(def, cfg)) return text(def.bounds.hi);
  const double lo = def.bounds.lo_open ? (def.bounds.lo + def.bounds.hi) / 2 : def.bounds.lo;
  return text(lo);
}

// What communicator setup compared before the table knew (runtime/config.cpp's kNames list,
// commit ea31fe2): the table's agreed set must stay exactly this unless a parameter is
// deliberately added or removed (then change this list in the same commit).
TEST(AgreedParams, RealTableAgreesOnWhatWasCheckedBefore) {
  const std::set<std::string> before = {
      "SKIPRING_ENABLE",
      "SKIPRING_SEGMENT_BYTES",
      "SKIPRING_PIPELINE_DEPTH",
      "SKIPRING_CHECK",
      "SKIPRING_TRANSPORT",
      "SKIPRING_SKIP",
      "SKIPRING_DIRECT_ALLGATHER",
      "SKIPRING_ALGO",
      "SKIPRING_HOST_MAP",
      "SKIPRING_TREE_GRAPH",
      "SKIPRING_MULTITREE_K",
      "SKIPRING_MODEL_LAT_US",
      "SKIPRING_MODEL_GBPS",
      "SKIPRING_MODEL_REDUCE_GBPS",
      "SKIPRING_SKIP_T_US",
      "SKIPRING_GPU_STAGING",
      "SKIPRING_AUTO_STRAGGLER",
      "SKIPRING_LATE_CHAIN",
      "SKIPRING_LATE_SEGMENT_BYTES",
      "SKIPRING_LATE_INFLIGHT",
      "SKIPRING_AUTO_MPI",
#ifdef SKIPRING_SIMGRID
      "SKIPRING_SIM_REDUCE_GBPS",
#endif
  };
  std::set<std::string> agreed;
  for (const ParamDef& def : param_table()) {
    if (param_agreed(def)) agreed.insert(def.name);
  }
  EXPECT_EQ(agreed, before);
  std::set<std::string> listed;
  for (const AgreedValue& v : agreed_values(Config())) listed.insert(v.name);
  EXPECT_EQ(listed, before);
  // The SimGrid-only rate is flagged (the SimGrid build compares it) and ignored elsewhere.
  EXPECT_EQ(find_param("SKIPRING_SIM_REDUCE_GBPS").agree, ParamAgree::kValue);
  EXPECT_EQ(find_param("SKIPRING_SKIP_T_US").agree, ParamAgree::kWhetherGiven);
  EXPECT_EQ(find_param("SKIPRING_TREE_GRAPH").agree, ParamAgree::kFileContents);
}

// A test table: the real one plus an agreed and a local parameter (on fields the real table
// keeps local). The agreed one is in agreed_values and its changes reach the fingerprint and
// its digest; the local one reaches neither.
TEST(AgreedParams, AddedParameterInATestTableIsChecked) {
  std::vector<ParamDef> table = param_table();
  table.push_back(ParamDef{"SKIPRING_TEST_AGREED",
                           ParamAgree::kValue,
                           &Config::poll_spins,
                           {0, 1000000},
                           "",
                           "test: agreed"});
  table.push_back(ParamDef{"SKIPRING_TEST_LOCAL",
                           ParamAgree::kLocal,
                           &Config::idle_sleep_us,
                           {0, 100000},
                           "",
                           "test: local"});
  const Config a;
  const std::vector<AgreedValue> va = agreed_values(a, table);
  ASSERT_EQ(va.size(), agreed_values(a).size() + 1);
  EXPECT_EQ(std::string(va.back().name), "SKIPRING_TEST_AGREED");
  EXPECT_EQ(va.back().shown, std::to_string(a.poll_spins));

  Config b = a;
  b.poll_spins = a.poll_spins + 1;
  EXPECT_NE(agreed_fingerprint(b, table), agreed_fingerprint(a, table));
  const std::vector<AgreedValue> vb = agreed_values(b, table);
  ASSERT_EQ(vb.size(), va.size());
  EXPECT_EQ(vb.back().shown, std::to_string(b.poll_spins));
  EXPECT_NE(vb.back().digest, va.back().digest);
  for (size_t i = 0; i + 1 < va.size(); ++i) EXPECT_EQ(vb[i].digest, va[i].digest) << va[i].name;
  // The real table keeps SKIPRING_POLL_SPINS local: there the change is invisible.
  EXPECT_EQ(agreed_fingerprint(b, param_table()), agreed_fingerprint(a, param_table()));
  EXPECT_EQ(digests(agreed_values(b)), digests(agreed_values(a)));

  Config c = a;
  c.idle_sleep_us = a.idle_sleep_us + 1;
  EXPECT_EQ(agreed_fingerprint(c, table), agreed_fingerprint(a, table));
  EXPECT_EQ(digests(agreed_values(c, table)), digests(va));
  for (const AgreedValue& v : agreed_values(c, table)) {
    EXPECT_NE(std::string(v.name), "SKIPRING_TEST_LOCAL");
  }
}

// Every agreed parameter of the real table: another value changes the fingerprint and its own
// digest, no other digest. (A field left out of the fingerprint would let the cache hand back
// the old values: ranks that differ on it would then pass the check.)
TEST(AgreedParams, EveryAgreedChangeReachesFingerprintAndDigest) {
  const std::map<std::string, std::string> custom_values =
      {
          {"SKIPRING_DIRECT_ALLGATHER", "1"}, {"SKIPRING_LATE_CHAIN", "0"},
          {"SKIPRING_ALGO", "ring"},          {"SKIPRING_HOST_MAP", "block:2"},
          {"SKIPRING_TRANSPORT", "ucx"},  // only where built with UCX (else not accepted)
      };
  const Config a;
  const std::string fa = agreed_fingerprint(a, param_table());
  const std::map<std::string, int64_t> da = digests(agreed_values(a));
  int checked = 0;
  for (const ParamDef& def : param_table()) {
    if (!param_agreed(def) || def.agree == ParamAgree::kFileContents) continue;
    std::string text = other_value(def, a);
    if (text.empty()) {
      auto it = custom_values.find(def.name);
      ASSERT_NE(it, custom_values.end()) << def.name << ": give the test another value";
      text = it->second;
    }
    Config b = a;
    if (!parse_param(def, text, &b)) {
      EXPECT_EQ(std::string(def.name), "SKIPRING_TRANSPORT") << text;
      continue;
    }
    ASSERT_NE(show_param(def, b), show_param(def, a)) << def.name;
    EXPECT_NE(agreed_fingerprint(b, param_table()), fa) << def.name << "=" << text;
    const std::map<std::string, int64_t> db = digests(agreed_values(b));
    for (const auto& [name, digest] : da) {
      EXPECT_EQ(db.at(name) != digest, name == def.name) << def.name << "=" << text << ": " << name;
    }
    ++checked;
  }
  EXPECT_GE(checked, 18);
}

// Local parameters (bool and numeric ones, by their bounds) change neither.
TEST(AgreedParams, LocalChangesReachNeither) {
  const Config a;
  const std::string fa = agreed_fingerprint(a, param_table());
  const std::map<std::string, int64_t> da = digests(agreed_values(a));
  int checked = 0;
  for (const ParamDef& def : param_table()) {
    if (param_agreed(def)) continue;
    const std::string text = other_value(def, a);
    if (text.empty()) continue;
    Config b = a;
    ASSERT_TRUE(parse_param(def, text, &b)) << def.name << "=" << text;
    EXPECT_EQ(agreed_fingerprint(b, param_table()), fa) << def.name;
    EXPECT_EQ(digests(agreed_values(b)), da) << def.name;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// kWhetherGiven (SKIPRING_SKIP_T_US): two given values agree, given and learnt (0) do not.
// kFileContents (SKIPRING_TREE_GRAPH): two paths to the same contents agree, other contents
// do not.
TEST(AgreedParams, WhetherGivenAndFileContents) {
  Config learnt, five, seven;
  five.skip_t_us = 5;
  seven.skip_t_us = 7;
  const auto digest_of = [](const Config& c, const std::string& name) {
    return digests(agreed_values(c)).at(name);
  };
  EXPECT_EQ(digest_of(five, "SKIPRING_SKIP_T_US"), digest_of(seven, "SKIPRING_SKIP_T_US"));
  EXPECT_NE(digest_of(five, "SKIPRING_SKIP_T_US"), digest_of(learnt, "SKIPRING_SKIP_T_US"));
  EXPECT_EQ(agreed_fingerprint(five, param_table()), agreed_fingerprint(seven, param_table()));

  const std::string dir = ::testing::TempDir();
  const std::string p1 = dir + "/agreed_graph_1.txt", p2 = dir + "/agreed_graph_2.txt",
                    p3 = dir + "/agreed_graph_3.txt";
  std::ofstream(p1) << "nodes 2\n0 1 10\n";
  std::ofstream(p2) << "nodes 2\n0 1 10\n";
  std::ofstream(p3) << "nodes 2\n0 1 20\n";
  Config g1, g2, g3, none;
  g1.tree_graph = p1;
  g2.tree_graph = p2;
  g3.tree_graph = p3;
  EXPECT_NE(agreed_fingerprint(g1, param_table()), agreed_fingerprint(g2, param_table()));
  EXPECT_EQ(digest_of(g1, "SKIPRING_TREE_GRAPH"), digest_of(g2, "SKIPRING_TREE_GRAPH"));
  EXPECT_NE(digest_of(g1, "SKIPRING_TREE_GRAPH"), digest_of(g3, "SKIPRING_TREE_GRAPH"));
  EXPECT_NE(digest_of(g1, "SKIPRING_TREE_GRAPH"), digest_of(none, "SKIPRING_TREE_GRAPH"));
  std::remove(p1.c_str());
  std::remove(p2.c_str());
  std::remove(p3.c_str());
}

// The cache holds one (table, fingerprint): alternating configs and tables never get another's
// values back.
TEST(AgreedParams, CacheNeverReturnsAnotherConfigsValues) {
  std::vector<ParamDef> table = param_table();
  table.push_back(ParamDef{"SKIPRING_TEST_AGREED",
                           ParamAgree::kValue,
                           &Config::poll_spins,
                           {0, 1000000},
                           "",
                           "test: agreed"});
  Config a, b;
  b.segment_bytes = 2 * a.segment_bytes;
  const auto da = digests(agreed_values(a));
  const auto db = digests(agreed_values(b));
  ASSERT_NE(da, db);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(digests(agreed_values(a)), da);
    EXPECT_EQ(agreed_values(a, table).size(), da.size() + 1);
    EXPECT_EQ(digests(agreed_values(b)), db);
    EXPECT_EQ(agreed_values(b).size(), da.size());
  }
}

// The texts README's "ranks" column shows, and the cheap key for every agreed custom parameter.
TEST(AgreedParams, TextsAndKeys) {
  EXPECT_EQ(param_agree_text(find_param("SKIPRING_ALGO")), "must agree");
  EXPECT_EQ(param_agree_text(find_param("SKIPRING_LOG_LEVEL")), "may differ");
  EXPECT_EQ(param_agree_text(find_param("SKIPRING_SKIP_T_US")), "must agree on 0 or not");
  for (const ParamDef& def : param_table()) {
    const auto* custom = std::get_if<CustomParam>(&def.target);
    if (custom == nullptr || def.agree == ParamAgree::kLocal) continue;
    EXPECT_NE(custom->key, nullptr) << def.name << ": agreed, so give it a key (field_key)";
  }
}

}  // namespace
}  // namespace skipring
