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
  const size_t group = group_width();
  std::string labels = fmt::format("#{:>{}}", "", kPrefixWidth + 16);
  if (opts_.run_oop) labels += fmt::format("{:^{}}", "out-of-place", group);
  if (opts_.run_ip) labels += fmt::format("{:^{}}", "in-place", group);
  fmt::print("{}\n", trim_right(labels));
  std::string titles =
      fmt::format("#{:>11} {:>13} {:>9} {:>7} {:>16}", "size", "count", "type", "redop", "algo");
  std::string units =
      fmt::format("#{:>11} {:>13} {:>9} {:>7} {:>16}", "(B)", "(elements)", "", "", "");
  for (int g = 0; g < (opts_.run_oop ? 1 : 0) + (opts_.run_ip ? 1 : 0); ++g) {
    titles += fmt::format(" {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}", "time", "algbw", "busbw",
                          "#wrong", "p50", "p99");
    units += fmt::format(" {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}", "(us)", "(GB/s)", "(GB/s)", "",
                         "(us)", "(us)");
    if (opts_.compare_mpi) {
      titles += fmt::format(" {:>8} {:>7}", "mpi_p50", "speedup");
      units += fmt::format(" {:>8} {:>7}", "(us)", "");
    }
  }
  fmt::print("{}\n{}\n", titles, trim_right(units));
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
  std::string line = fmt::format("{:>12} {:>13} {:>9} {:>7} {:>16}", row.bytes, row.count, row.type,
                                 row.op, row.algo_label());
  for (const auto* mode : {&row.oop, &row.ip}) {
    if (!mode->has_value()) continue;
    const ModeResult& m = **mode;
    const ImplResult& s = m.skipring;
    line += fmt::format(" {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}", format_micros(s.avg_us),
                        format_rate(s.algbw), format_rate(s.busbw),
                        s.wrong ? std::to_string(*s.wrong) : std::string("N/A"),
                        format_micros(s.p50_us), format_micros(s.p99_us));
    if (opts_.compare_mpi) {
      line +=
          m.mpi ? fmt::format(" {:>8} {:>7}", format_micros(m.mpi->p50_us), format_rate(m.speedup))
                : fmt::format(" {:>8} {:>7}", "-", "-");
    }
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
