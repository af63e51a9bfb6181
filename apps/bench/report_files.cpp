// skipring_bench report: the --json and --csv files (one object / line per row, the same
// columns in both).
#include <fmt/core.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>

#include "apps/bench/report.h"

namespace skipring_bench {
namespace {

Json opt_json(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

}  // namespace

bool Report::open_files(MPI_Comm comm) {
  int ok = 1;
  std::string error;
  if (rank_ == 0) {
    if (!opts_.json_path.empty()) {
      json_.open(opts_.json_path, std::ios::out | std::ios::trunc);
      if (!json_) error = "cannot open --json file '" + opts_.json_path + "'";
    }
    if (!opts_.csv_path.empty() && error.empty()) {
      csv_.open(opts_.csv_path, std::ios::out | std::ios::trunc);
      if (!csv_) error = "cannot open --csv file '" + opts_.csv_path + "'";
    }
    if (!error.empty()) {
      fmt::print(stderr, "skipring_bench: {}: {}\n", error, std::strerror(errno));
      ok = 0;
    }
  }
  check_mpi(MPI_Bcast(&ok, 1, MPI_INT, 0, comm), "MPI_Bcast");
  return ok != 0;
}

Json Report::key_json(const RowKey& key, const std::string& algo) const {
  Json j;
  j["size_bytes"] = key.bytes;
  j["count"] = key.count;
  j["type"] = key.type;
  j["redop"] = key.op;
  if (!algo.empty()) j["algo"] = algo;
  j["nranks"] = nranks_;
  j["skipring_native"] = key.native ? Json(*key.native) : Json(nullptr);
  return j;
}

Json Report::interleaved_json(const InterleavedRow& row) const {
  Json j = key_json(row, "");
  j["mode"] = opts_.straggler ? "straggler" : "overhead";
  j["iters"] = opts_.iters;
  j["late_rank"] = opts_.late_rank >= 0 ? Json(opts_.late_rank) : Json(nullptr);
  j["late_ms"] = opts_.late_rank >= 0 ? Json(opts_.late_ms) : Json(nullptr);
  j["late_every"] = opts_.late_every;
  j["inject"] = opts_.inject_given ? Json(opts_.inject) : Json(nullptr);
  auto finite = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  for (const Variant v : opts_.variants) {
    const VariantResult* r = row.find(v);
    const std::string p = std::string(variant_name(v)) + "_";
    auto num = [&](double SampleSummary::*stat, SampleSummary VariantResult::*sample) {
      return r ? finite((r->*sample).*stat) : Json(nullptr);
    };
    j[p + "after_p50_us"] = num(&SampleSummary::p50, &VariantResult::after_us);
    j[p + "after_p99_us"] = num(&SampleSummary::p99, &VariantResult::after_us);
    j[p + "after_mean_us"] = num(&SampleSummary::mean, &VariantResult::after_us);
    j[p + "after_min_us"] = num(&SampleSummary::min, &VariantResult::after_us);
    j[p + "after_max_us"] = num(&SampleSummary::max, &VariantResult::after_us);
    j[p + "total_p50_us"] = num(&SampleSummary::p50, &VariantResult::total_us);
    j[p + "total_p99_us"] = num(&SampleSummary::p99, &VariantResult::total_us);
    j[p + "wrong"] = r ? opt_json(r->wrong) : Json(nullptr);
    if (v != Variant::kMpi) {
      const std::optional<double> skips = r ? r->per_iter(r->skips) : std::nullopt;
      const std::optional<double> late = r ? r->per_iter(r->late_pieces) : std::nullopt;
      j[p + "skips_per_iter"] = skips ? Json(*skips) : Json(nullptr);
      j[p + "late_pieces_per_iter"] = late ? Json(*late) : Json(nullptr);
    }
  }
  j["skip_over_ring"] = finite(row.p50_ratio(Variant::kSkip, Variant::kRing));
  if (has_variant(Variant::kMpi)) {
    j["skip_over_mpi"] = finite(row.p50_ratio(Variant::kSkip, Variant::kMpi));
  }
  return j;
}

void Report::close_files() {
  if (json_.is_open()) {
    json_ << rows_.dump(2) << "\n";
    json_.close();
    if (!json_) fmt::print(stderr, "skipring_bench: writing '{}' failed\n", opts_.json_path);
  }
  if (csv_.is_open()) csv_.close();
}

Json Report::to_json(const Row& row) const {
  Json j = key_json(row, row.algo_label());
  struct ModeColumns {
    const char* prefix;
    bool enabled;
    const std::optional<ModeResult>* result;
  };
  const ModeColumns modes[] = {{"oop_", opts_.run_oop, &row.oop}, {"ip_", opts_.run_ip, &row.ip}};
  for (const ModeColumns& mode : modes) {
    if (!mode.enabled) continue;
    const std::string p = mode.prefix;
    const std::optional<ModeResult>& result = *mode.result;
    const ModeResult* m = result.has_value() ? &*result : nullptr;
    const ImplResult* s = m ? &m->skipring : nullptr;
    auto num = [](const ImplResult* r, double ImplResult::*field) {
      return r ? Json((*r).*field) : Json(nullptr);
    };
    j[p + "time_us"] = num(s, &ImplResult::avg_us);
    j[p + "algbw_gbps"] = num(s, &ImplResult::algbw);
    j[p + "busbw_gbps"] = num(s, &ImplResult::busbw);
    j[p + "wrong"] = s ? opt_json(s->wrong) : Json(nullptr);
    j[p + "p50_us"] = num(s, &ImplResult::p50_us);
    j[p + "p99_us"] = num(s, &ImplResult::p99_us);
    j[p + "iqm_us"] = num(s, &ImplResult::iqm_us);
    j[p + "min_us"] = num(s, &ImplResult::min_us);
    j[p + "max_us"] = num(s, &ImplResult::max_us);
    j[p + "rank_avg_us"] = num(s, &ImplResult::rank_avg_us);
    j[p + "rank_min_us"] = num(s, &ImplResult::rank_min_us);
    j[p + "rank_max_us"] = num(s, &ImplResult::rank_max_us);
    const SkipStats* st = m && m->stats ? &*m->stats : nullptr;
    j[p + "skips"] = st ? Json(st->skips) : Json(nullptr);
    j[p + "late_pieces"] = st ? Json(st->late_pieces) : Json(nullptr);
    j[p + "wait_us"] = st ? Json(st->wait_us) : Json(nullptr);
    if (opts_.compare_mpi) {
      const ImplResult* mp = m && m->mpi ? &*m->mpi : nullptr;
      j[p + "mpi_time_us"] = num(mp, &ImplResult::avg_us);
      j[p + "mpi_algbw_gbps"] = num(mp, &ImplResult::algbw);
      j[p + "mpi_busbw_gbps"] = num(mp, &ImplResult::busbw);
      j[p + "mpi_wrong"] = mp ? opt_json(mp->wrong) : Json(nullptr);
      j[p + "mpi_p50_us"] = num(mp, &ImplResult::p50_us);
      j[p + "mpi_p99_us"] = num(mp, &ImplResult::p99_us);
      j[p + "mpi_iqm_us"] = num(mp, &ImplResult::iqm_us);
      j[p + "speedup"] = mp ? Json(m->speedup) : Json(nullptr);
    }
  }
  return j;
}

void Report::write_csv_row(const Json& row) {
  if (!csv_.is_open()) return;
  if (!csv_header_written_) {
    bool first = true;
    for (const auto& item : row.items()) {
      csv_ << (first ? "" : ",") << item.key();
      first = false;
    }
    csv_ << "\n";
    csv_header_written_ = true;
  }
  bool first = true;
  for (const auto& item : row.items()) {
    csv_ << (first ? "" : ",");
    first = false;
    const Json& v = item.value();
    if (v.is_null()) continue;
    csv_ << (v.is_string() ? v.get<std::string>() : v.dump());
  }
  csv_ << "\n";
  csv_.flush();
}

}  // namespace skipring_bench
