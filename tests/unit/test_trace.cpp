// TraceWriter: the per-rank Chrome trace parses as JSON with the expected events, times and args.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "straggler/trace.h"

namespace skipring {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "skipring-trace-test-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  static json parse(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return json::parse(in);  // throws (failing the test) on invalid JSON
  }

  std::string dir_;
};

// Collective k starts at 100 + 0.1 k seconds and lasts 10 ms. Steps:
//   RS 0: [start, start+2ms], no skips;
//   RS 1: [start+2ms, start+5ms], 2 skips, 1 late piece;
//   AG 0: t_end == t_start (not drawn), 1 skip;
//   AG 1: [start+6ms, start+9ms].
CollectiveStats make_stats(uint64_t seq, double start) {
  CollectiveStats c;
  c.seq = seq;
  c.bytes = 1 << 20;
  c.start = start;
  c.end = start + 0.010;
  c.wait_s = 0.0015;
  c.skips = 3;
  c.late_pieces = 1;
  c.slowest_neighbour = 2;
  auto step = [&](Phase ph, int s, double t0, double t1, int skips, int late) {
    StepRecord r;
    r.phase = ph;
    r.step = s;
    r.chunk = 10 + s;
    r.from = 2;
    r.to = 0;
    r.segments = 4;
    r.wait_s = 0.0005;
    r.reduce_s = 0.00025;
    r.transfer_s = 0.000125;
    r.t_start = start + t0;
    r.t_end = start + t1;
    r.skips = skips;
    r.late_pieces = late;
    c.steps.push_back(r);
  };
  step(Phase::kReduceScatter, 0, 0.000, 0.002, 0, 0);
  step(Phase::kReduceScatter, 1, 0.002, 0.005, 2, 1);
  step(Phase::kAllgather, 0, 0.005, 0.005, 1, 0);
  step(Phase::kAllgather, 1, 0.006, 0.009, 0, 0);
  return c;
}

TEST_F(TraceTest, ThreeCollectives) {
  std::unique_ptr<TraceWriter> w;
  std::string err;
  const std::string sub = dir_ + "/nested/deeper";  // created like mkdir -p
  ASSERT_EQ(TraceWriter::open(sub, 3, &w, &err), Status::kOk) << err;
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->path(), sub + "/skipring-trace-rank3.json");
  for (uint64_t k = 0; k < 3; ++k) w->add(make_stats(k + 7, 100.0 + 0.1 * k));
  ASSERT_EQ(w->close(), Status::kOk);
  EXPECT_EQ(w->close(), Status::kOk);  // idempotent

  json doc = parse(sub + "/skipring-trace-rank3.json");
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc.contains("traceEvents"));
  const json& ev = doc["traceEvents"];
  ASSERT_TRUE(ev.is_array());
  // 3 metadata + 3 x (1 collective + 3 drawn steps + 2 skip instants).
  ASSERT_EQ(ev.size(), 3u + 3u * 6u);
  EXPECT_EQ(w->events(), ev.size());

  int meta = 0, collectives = 0, steps = 0, skips = 0;
  for (const json& e : ev) {
    EXPECT_EQ(e["pid"], 3);
    const std::string ph = e["ph"];
    if (ph == "M") {
      ++meta;
      continue;
    }
    ASSERT_TRUE(e["ts"].is_number());
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    if (ph == "X" && e["tid"] == 0) {
      ++collectives;
    } else if (ph == "X") {
      EXPECT_EQ(e["tid"], 1);
      ++steps;
    } else {
      EXPECT_EQ(ph, "i");
      EXPECT_EQ(e["name"], "skip");
      EXPECT_EQ(e["tid"], 1);
      ++skips;
    }
  }
  EXPECT_EQ(meta, 3);
  EXPECT_EQ(collectives, 3);
  EXPECT_EQ(steps, 9);
  EXPECT_EQ(skips, 6);

  EXPECT_EQ(ev[0]["name"], "process_name");
  EXPECT_EQ(ev[0]["args"]["name"], "rank 3");

  // Second collective (seq 8): events 3 + 6 .. 3 + 11.
  const json& c = ev[9];
  EXPECT_EQ(c["name"], "allreduce seq=8");
  EXPECT_EQ(c["ph"], "X");
  EXPECT_EQ(c["tid"], 0);
  EXPECT_NEAR(c["ts"].get<double>(), 100.1e6, 0.01);  // the clock time, in us
  EXPECT_NEAR(c["dur"].get<double>(), 10000.0, 0.01);
  EXPECT_EQ(c["args"]["bytes"], 1 << 20);
  EXPECT_EQ(c["args"]["skips"], 3);
  EXPECT_EQ(c["args"]["late"], 1);
  EXPECT_NEAR(c["args"]["wait_s"].get<double>(), 0.0015, 1e-12);
  EXPECT_EQ(c["args"]["slowest_neighbour"], 2);

  const json& rs0 = ev[10];
  EXPECT_EQ(rs0["name"], "RS step 0");
  EXPECT_NEAR(rs0["ts"].get<double>(), 100.1e6, 0.01);
  EXPECT_NEAR(rs0["dur"].get<double>(), 2000.0, 0.01);
  EXPECT_EQ(rs0["args"]["chunk"], 10);
  EXPECT_EQ(rs0["args"]["from"], 2);
  EXPECT_EQ(rs0["args"]["to"], 0);
  EXPECT_EQ(rs0["args"]["segments"], 4);
  EXPECT_NEAR(rs0["args"]["wait_us"].get<double>(), 500.0, 1e-6);
  EXPECT_NEAR(rs0["args"]["reduce_us"].get<double>(), 250.0, 1e-6);
  EXPECT_NEAR(rs0["args"]["transfer_us"].get<double>(), 125.0, 1e-6);
  EXPECT_EQ(rs0["args"]["skips"], 0);
  EXPECT_EQ(rs0["args"]["late_pieces"], 0);

  const json& rs1 = ev[11];
  EXPECT_EQ(rs1["name"], "RS step 1");
  EXPECT_NEAR(rs1["ts"].get<double>(), 100.102e6, 0.01);
  EXPECT_NEAR(rs1["dur"].get<double>(), 3000.0, 0.01);
  EXPECT_EQ(rs1["args"]["skips"], 2);
  EXPECT_EQ(rs1["args"]["late_pieces"], 1);

  const json& skip1 = ev[12];
  EXPECT_EQ(skip1["name"], "skip");
  EXPECT_EQ(skip1["ph"], "i");
  EXPECT_NEAR(skip1["ts"].get<double>(), 100.102e6, 0.01);
  EXPECT_EQ(skip1["args"]["skips"], 2);
  EXPECT_EQ(skip1["args"]["phase"], "RS");

  // AG step 0 has t_end == t_start: only its skip instant is written.
  const json& skip2 = ev[13];
  EXPECT_EQ(skip2["name"], "skip");
  EXPECT_EQ(skip2["args"]["phase"], "AG");
  EXPECT_EQ(skip2["args"]["step"], 0);

  const json& ag1 = ev[14];
  EXPECT_EQ(ag1["name"], "AG step 1");
  EXPECT_NEAR(ag1["ts"].get<double>(), 100.106e6, 0.01);
  EXPECT_NEAR(ag1["dur"].get<double>(), 3000.0, 0.01);

  // Absolute clock time: rank files of one host line up.
  EXPECT_EQ(ev[3]["name"], "allreduce seq=7");
  EXPECT_NEAR(ev[3]["ts"].get<double>(), 100e6, 0.01);
}

TEST_F(TraceTest, EmptyTraceIsValidJson) {
  std::unique_ptr<TraceWriter> w;
  std::string err;
  ASSERT_EQ(TraceWriter::open(dir_, 0, &w, &err), Status::kOk) << err;
  ASSERT_EQ(w->close(), Status::kOk);
  json doc = parse(dir_ + "/skipring-trace-rank0.json");
  ASSERT_TRUE(doc["traceEvents"].is_array());
  for (const json& e : doc["traceEvents"]) EXPECT_EQ(e["ph"], "M");
}

TEST_F(TraceTest, DestructorClosesTheFile) {
  {
    std::unique_ptr<TraceWriter> w;
    std::string err;
    ASSERT_EQ(TraceWriter::open(dir_, 1, &w, &err), Status::kOk) << err;
    w->add(make_stats(0, 5.0));
  }
  json doc = parse(dir_ + "/skipring-trace-rank1.json");
  EXPECT_EQ(doc["traceEvents"].size(), 3u + 6u);
}

TEST_F(TraceTest, FlushedPerCollectiveBeforeClose) {
  std::unique_ptr<TraceWriter> w;
  std::string err;
  ASSERT_EQ(TraceWriter::open(dir_, 2, &w, &err), Status::kOk) << err;
  w->add(make_stats(0, 1.0));
  // Without the closing bracket: everything written so far is on disk.
  std::ifstream in(dir_ + "/skipring-trace-rank2.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"allreduce seq=0\""), std::string::npos);
  EXPECT_NE(text.find("\"AG step 1\""), std::string::npos);
  EXPECT_EQ(json::parse(text + "\n]}", nullptr, false).is_discarded(), false);
  EXPECT_EQ(w->close(), Status::kOk);
}

TEST_F(TraceTest, NonFiniteValuesStayValidJson) {
  std::unique_ptr<TraceWriter> w;
  std::string err;
  ASSERT_EQ(TraceWriter::open(dir_, 4, &w, &err), Status::kOk) << err;
  CollectiveStats c = make_stats(1, 2.0);
  c.wait_s = std::numeric_limits<double>::quiet_NaN();
  c.steps[0].reduce_s = std::numeric_limits<double>::infinity();
  w->add(c);
  ASSERT_EQ(w->close(), Status::kOk);
  json doc = parse(dir_ + "/skipring-trace-rank4.json");
  EXPECT_EQ(doc["traceEvents"][3]["args"]["wait_s"], 0);
}

TEST_F(TraceTest, UnwritablePathNamesThePath) {
  // Root ignores permissions, so use a directory path that runs through a regular file.
  const std::string file = dir_ + "/plain-file";
  std::ofstream(file) << "x";
  const std::string bad = file + "/traces";
  std::unique_ptr<TraceWriter> w;
  std::string err;
  EXPECT_NE(TraceWriter::open(bad, 0, &w, &err), Status::kOk);
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(err.find(bad), std::string::npos) << err;
}

}  // namespace
}  // namespace skipring
