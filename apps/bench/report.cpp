// skipring_bench report: the table on stdout (header, one line per row, summary) and the
// totals behind the summary.
#include "apps/bench/report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace skipring_bench {
namespace {

std::string trim_right(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// A header line from cells formatted like a row's: its first character (a space, the columns
// being right-aligned) becomes the '#' that marks comments.
std::string as_comment(std::string cells) {
  if (!cells.empty()) cells[0] = '#';
  return cells;
}

// nccl-tests' first columns: size count type redop root (root -1: all-reduce has none).
std::string key_cells(const std::string& size, const std::string& count, const std::string& type,
                      const std::string& op, const std::string& root) {
  return fmt::format("{:>12} {:>13} {:>9} {:>7} {:>7}", size, count, type, op, root);
}

// nccl-tests' columns of one variant (out-of-place, in-place): time algbw busbw #wrong.
std::string nccl_cells(const std::string& time, const std::string& algbw, const std::string& busbw,
                       const std::string& wrong) {
  return fmt::format(" {:>8} {:>7} {:>7} {:>6}", time, algbw, busbw, wrong);
}

// skipring's columns of one variant after nccl-tests' ones: p50 p99 (--compare mpi: mpi_p50
// speedup).
std::string extra_cells(bool compare_mpi, const std::string& p50, const std::string& p99,
                        const std::string& mpi_p50, const std::string& speedup) {
  std::string cells = fmt::format(" {:>8} {:>8}", p50, p99);
  if (compare_mpi) cells += fmt::format(" {:>8} {:>7}", mpi_p50, speedup);
  return cells;
}

// The algorithm column ("auto:rabenseifner" is the longest label).
std::string algo_cell(const std::string& algo) { return fmt::format(" {:>18}", algo); }

// OSU's columns (osu_allreduce -f): size, avg/min/max latency, iterations.
constexpr int kOsuSizeWidth = 10;
constexpr int kOsuFieldWidth = 18;
constexpr int kOsuIterWidth = 12;

// skipring's columns after OSU's: type redop algo #wrong.
std::string osu_extra_cells(const std::string& type, const std::string& op, const std::string& algo,
                            const std::string& wrong) {
  return fmt::format(" {:>9} {:>7}{} {:>6}", type, op, algo_cell(algo), wrong);
}

}  // namespace

void Report::comment(const std::string& text) const {
  if (rank_ != 0) return;
  fmt::print("# {}\n", text);
  std::fflush(stdout);
}

void Report::print_header(const std::vector<std::string>& preamble) const {
  if (rank_ != 0) return;
  for (const std::string& line : preamble) fmt::print("#{}{}\n", line.empty() ? "" : " ", line);
  fmt::print("#\n");
  if (opts_.interleaved()) {
    print_interleaved_header();
    return;
  }
  if (opts_.osu) {
    // osu_allreduce -f's header, then skipring's columns.
    fmt::print(
        "# {} all-reduce, {}: latency per rank averaged over the iterations; Avg, Min, "
        "Max over the ranks\n",
        opts_.run_oop ? "out-of-place" : "in-place", "skipring");
    fmt::print("{:<{}}{:>{}}{:>{}}{:>{}}{:>{}}{}\n", "# Size", kOsuSizeWidth, "Avg Latency(us)",
               kOsuFieldWidth, "Min Latency(us)", kOsuFieldWidth, "Max Latency(us)", kOsuFieldWidth,
               "Iterations", kOsuIterWidth, osu_extra_cells("type", "redop", "algo", "#wrong"));
    std::fflush(stdout);
    return;
  }
  // nccl-tests' columns at nccl-tests' positions (size count type redop root, then time algbw
  // busbw #wrong out-of-place and in-place: whitespace-separated fields 0-12), both variants
  // always ("-" for one not run); skipring's columns after them: algo, then p50 p99 (and
  // mpi_p50 speedup) per variant.
  const bool cmp = opts_.compare_mpi;
  const std::string key = key_cells("size", "count", "type", "redop", "root");
  const std::string group = nccl_cells("time", "algbw", "busbw", "#wrong");
  const std::string extra = extra_cells(cmp, "p50", "p99", "mpi_p50", "speedup");
  const std::string algo = algo_cell("algo");
  std::string labels = fmt::format("#{:>{}}", "", key.size() - 1);
  labels += fmt::format("{:^{}}{:^{}}", "out-of-place", group.size(), "in-place", group.size());
  labels += fmt::format("{:>{}}{:^{}}{:^{}}", "", algo.size(), "out-of-place", extra.size(),
                        "in-place", extra.size());
  std::string titles = as_comment(key) + group + group + algo + extra + extra;
  const std::string unit_group = nccl_cells("(us)", "(GB/s)", "(GB/s)", "");
  const std::string unit_extra = extra_cells(cmp, "(us)", "(us)", "(us)", "");
  std::string units = as_comment(key_cells("(B)", "(elements)", "", "", "")) + unit_group +
                      unit_group + algo_cell("") + unit_extra + unit_extra;
  fmt::print("{}\n{}\n{}\n", trim_right(labels), titles, trim_right(units));
  std::fflush(stdout);
}

void Report::add_row(const Row& row) {
  ++rows_added_;
  for (const auto* mode : {&row.oop, &row.ip}) {
    if (!mode->has_value()) continue;
    const ModeResult& m = **mode;
    wrong_ += m.skipring.wrong.value_or(0);
    busbw_sum_ += m.skipring.busbw;
    ++busbw_n_;
    if (m.stats) {
      skips_ += m.stats->skips;
      late_ += m.stats->late_pieces;
    }
    if (m.mpi) {
      mpi_wrong_ += m.mpi->wrong.value_or(0);
      mpi_busbw_sum_ += m.mpi->busbw;
      if (m.speedup > 0 && std::isfinite(m.speedup)) {
        log_speedup_sum_ += std::log(m.speedup);
        ++speedup_n_;
      }
    }
  }
  if (rank_ != 0) return;
  auto wrong_text = [](const ImplResult& s) {
    return s.wrong ? std::to_string(*s.wrong) : std::string("N/A");
  };
  std::string line;
  if (opts_.osu) {
    const ModeResult& m = row.oop ? *row.oop : *row.ip;
    const ImplResult& s = m.skipring;
    line = fmt::format("{:<{}}{:>{}.2f}{:>{}.2f}{:>{}.2f}{:>{}}", row.bytes, kOsuSizeWidth,
                       s.rank_avg_us, kOsuFieldWidth, s.rank_min_us, kOsuFieldWidth, s.rank_max_us,
                       kOsuFieldWidth, opts_.iters, kOsuIterWidth) +
           osu_extra_cells(row.type, row.op, row.algo_label(), wrong_text(s));
  } else {
    line = key_cells(std::to_string(row.bytes), std::to_string(row.count), row.type, row.op, "-1");
    std::string extras = algo_cell(row.algo_label());
    for (const auto* mode : {&row.oop, &row.ip}) {
      if (!mode->has_value()) {
        line += nccl_cells("-", "-", "-", "-");
        extras += extra_cells(opts_.compare_mpi, "-", "-", "-", "-");
        continue;
      }
      const ModeResult& m = **mode;
      const ImplResult& s = m.skipring;
      line += nccl_cells(format_micros(s.avg_us), format_rate(s.algbw), format_rate(s.busbw),
                         wrong_text(s));
      extras += extra_cells(opts_.compare_mpi, format_micros(s.p50_us), format_micros(s.p99_us),
                            m.mpi ? format_micros(m.mpi->p50_us) : std::string("-"),
                            m.mpi ? format_rate(m.speedup) : std::string("-"));
    }
    line += extras;
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
  const Json json_row = to_json(row);
  rows_.push_back(json_row);
  write_csv_row(json_row);
}

void Report::add_interleaved_row(const InterleavedRow& row) {
  ++rows_added_;
  for (const VariantResult& r : row.variants) {
    variant_wrong_[static_cast<int>(r.variant)] += r.wrong.value_or(0);
    if (r.skips) variant_skips_[static_cast<int>(r.variant)] += *r.skips;
    if (r.late_pieces) variant_late_[static_cast<int>(r.variant)] += *r.late_pieces;
  }
  skip_over_ring_.add(row.p50_ratio(Variant::kSkip, Variant::kRing));
  skip_over_mpi_.add(row.p50_ratio(Variant::kSkip, Variant::kMpi));
  if (rank_ != 0) return;
  std::string line =
      fmt::format("{:>12} {:>13} {:>9} {:>7}", row.bytes, row.count, row.type, row.op);
  for (const CellGroup& group : interleaved_cells(&row)) {
    for (const Cell& cell : group.cells) line += fmt::format(" {:>{}}", cell.value, cell.width);
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
  const Json json_row = interleaved_json(row);
  rows_.push_back(json_row);
  write_csv_row(json_row);
}

int64_t Report::finish(const std::string& failure) {
  if (opts_.interleaved()) return finish_interleaved(failure);
  if (rank_ == 0) {
    if (opts_.check) {
      fmt::print("# Out of bounds values : {} {}\n", wrong_, wrong_ == 0 ? "OK" : "FAILED");
    } else {
      fmt::print("# Out of bounds values : 0 OK (validation disabled)\n");
    }
    fmt::print("# Avg bus bandwidth    : {:.6g}\n",
               busbw_n_ > 0 ? busbw_sum_ / static_cast<double>(busbw_n_) : 0.0);
    if (opts_.compare_mpi) {
      fmt::print("# Avg MPI bus bandwidth: {:.6g}\n",
                 busbw_n_ > 0 ? mpi_busbw_sum_ / static_cast<double>(busbw_n_) : 0.0);
      fmt::print("# Geomean speedup      : {:.4g}  (t_mpi_p50 / t_skipring_p50 over {} rows)\n",
                 speedup_n_ > 0 ? std::exp(log_speedup_sum_ / speedup_n_) : 0.0, speedup_n_);
      if (opts_.check) {
        fmt::print("# MPI reference wrong values : {}{}\n", mpi_wrong_,
                   mpi_wrong_ == 0 ? "" : "  (the checker or the MPI library is broken)");
      }
    }
    fmt::print("# skipring skips       : {}  (late pieces: {}; all ranks, timed iterations)\n",
               skips_, late_);
    if (!failure.empty()) fmt::print("# FAILED: {}\n", failure);
    fmt::print("#\n");
    std::fflush(stdout);
    close_files();
  }
  return wrong_ + mpi_wrong_;
}

bool Report::has_variant(Variant v) const {
  return std::find(opts_.variants.begin(), opts_.variants.end(), v) != opts_.variants.end();
}

std::vector<Report::CellGroup> Report::interleaved_cells(const InterleavedRow* row) const {
  auto text = [&](auto&& format) { return row ? format() : std::string(); };
  CellGroup after_p50{"after p50 (us)", {}};
  CellGroup after_p99{"after p99 (us)", {}};
  CellGroup total_p50{"total p50 (us)", {}};
  CellGroup wrong{"#wrong", {}};
  for (const Variant v : opts_.variants) {
    const VariantResult* r = row ? row->find(v) : nullptr;
    auto micros = [&](double SampleSummary::*stat, SampleSummary VariantResult::*sample) {
      return text([&] { return r ? format_micros((r->*sample).*stat) : std::string("-"); });
    };
    after_p50.cells.push_back(
        {variant_name(v), "(us)", 8, micros(&SampleSummary::p50, &VariantResult::after_us)});
    after_p99.cells.push_back(
        {variant_name(v), "(us)", 8, micros(&SampleSummary::p99, &VariantResult::after_us)});
    total_p50.cells.push_back(
        {variant_name(v), "(us)", 8, micros(&SampleSummary::p50, &VariantResult::total_us)});
    wrong.cells.push_back({variant_name(v), "", 6, text([&] {
                             return r && r->wrong ? std::to_string(*r->wrong) : std::string("N/A");
                           })});
  }
  CellGroup ratio{"ratio", {}};
  ratio.cells.push_back({"skip/ring", "", 9, text([&] {
                           return format_rate(row->p50_ratio(Variant::kSkip, Variant::kRing));
                         })});
  if (has_variant(Variant::kMpi)) {
    ratio.cells.push_back({"skip/mpi", "", 8, text([&] {
                             return format_rate(row->p50_ratio(Variant::kSkip, Variant::kMpi));
                           })});
  }
  CellGroup per_iter{"skip per iter", {}};
  const VariantResult* skip = row ? row->find(Variant::kSkip) : nullptr;
  auto per_iter_text = [&](const std::optional<uint64_t> VariantResult::*field) {
    return text([&] {
      const std::optional<double> v = skip ? skip->per_iter(skip->*field) : std::nullopt;
      return v ? fmt::format("{:.1f}", *v) : std::string("N/A");
    });
  };
  per_iter.cells.push_back({"skips", "", 7, per_iter_text(&VariantResult::skips)});
  per_iter.cells.push_back({"late", "", 7, per_iter_text(&VariantResult::late_pieces)});
  return {after_p50, after_p99, ratio, total_p50, per_iter, wrong};
}

void Report::print_interleaved_header() const {
  std::string labels = fmt::format("#{:>{}}", "", kPrefixWidth - 1);
  std::string titles = fmt::format("#{:>11} {:>13} {:>9} {:>7}", "size", "count", "type", "redop");
  std::string units = fmt::format("#{:>11} {:>13} {:>9} {:>7}", "(B)", "(elements)", "", "");
  for (const CellGroup& group : interleaved_cells(nullptr)) {
    int width = -1;  // the group's columns and the spaces between them
    for (const Cell& cell : group.cells) {
      width += cell.width + 1;
      titles += fmt::format(" {:>{}}", cell.title, cell.width);
      units += fmt::format(" {:>{}}", cell.unit, cell.width);
    }
    labels += fmt::format(" {:^{}}", group.label, width);
  }
  fmt::print("{}\n{}\n{}\n", trim_right(labels), titles, trim_right(units));
  std::fflush(stdout);
}

int64_t Report::finish_interleaved(const std::string& failure) {
  int64_t wrong = 0;
  for (const int64_t w : variant_wrong_) wrong += w;
  if (rank_ == 0) {
    if (opts_.check) {
      std::string per_variant;
      for (const Variant v : opts_.variants) {
        per_variant += fmt::format("{}{} {}", per_variant.empty() ? "" : ", ", variant_name(v),
                                   variant_wrong_[static_cast<int>(v)]);
      }
      fmt::print("# Out of bounds values : {} {}  ({})\n", wrong, wrong == 0 ? "OK" : "FAILED",
                 per_variant);
    } else {
      fmt::print("# Out of bounds values : 0 OK (validation disabled)\n");
    }
    fmt::print(
        "# Geomean skip/ring    : {:.4g}  (p50 after last arrival, over {} rows; < 1: "
        "skip-ahead faster)\n",
        skip_over_ring_.value(), skip_over_ring_.count());
    if (has_variant(Variant::kMpi)) {
      fmt::print("# Geomean skip/mpi     : {:.4g}  (p50 after last arrival, over {} rows)\n",
                 skip_over_mpi_.value(), skip_over_mpi_.count());
    }
    const int skip = static_cast<int>(Variant::kSkip);
    const int ring = static_cast<int>(Variant::kRing);
    fmt::print(
        "# skipring skips       : {}  (late pieces: {}; skip variant, all ranks, timed "
        "iterations)\n",
        variant_skips_[skip], variant_late_[skip]);
    fmt::print("# plain-ring skips     : {}  (late pieces: {}; must be 0)\n", variant_skips_[ring],
               variant_late_[ring]);
    if (!failure.empty()) fmt::print("# FAILED: {}\n", failure);
    fmt::print("#\n");
    std::fflush(stdout);
    close_files();
  }
  return wrong;
}

}  // namespace skipring_bench
