// skipring_bench report: the table on stdout, the JSON / CSV files and the summary. Rank 0
// prints and writes; every rank keeps the error counts, which decide the exit status.
#ifndef SKIPRING_APPS_BENCH_REPORT_H_
#define SKIPRING_APPS_BENCH_REPORT_H_

#include <mpi.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench/context.h"
#include "apps/bench/options.h"
#include "apps/bench/results.h"
#include "apps/bench_util.h"

namespace skipring_bench {

using Json = nlohmann::ordered_json;

// The header lines above the table: the run's parameters, the mode's legend, the MPI library,
// the SKIPRING_* environment and (rank 0 only: the gathered) host and pid of every rank.
std::vector<std::string> preamble(const Context& ctx, const std::vector<std::string>& hosts,
                                  const std::vector<int>& pids);

class Report {
 public:
  Report(const Options& opts, int rank, int nranks) : opts_(opts), rank_(rank), nranks_(nranks) {}

  // Opens the output files (rank 0) and tells every rank whether that worked.
  bool open_files(MPI_Comm comm);
  // A "# text" line (rank 0).
  void comment(const std::string& text) const;
  // The preamble, then the column titles of the mode (rank 0).
  void print_header(const std::vector<std::string>& preamble) const;
  // One size of the normal mode.
  void add_row(const Row& row);
  // One size of the interleaved modes (straggler, overhead).
  void add_interleaved_row(const InterleavedRow& row);
  int64_t rows_added() const { return rows_added_; }
  // Prints the summary, writes the JSON file; returns the number of wrong values (skipring and
  // MPI reference together).
  int64_t finish(const std::string& failure);

 private:
  static constexpr int kPrefixWidth = 44;  // "size count type redop" columns

  // Interleaved modes: a column (title, unit, width, value) and a labelled group of columns.
  struct Cell {
    std::string title;
    std::string unit;
    int width = 8;
    std::string value;
  };
  struct CellGroup {
    std::string label;
    std::vector<Cell> cells;
  };

  bool has_variant(Variant v) const;
  // The interleaved modes' columns after "size count type redop", holding `row`'s values (empty
  // when row is null, for the header); one function for both keeps titles and values in step.
  std::vector<CellGroup> interleaved_cells(const InterleavedRow* row) const;
  void print_interleaved_header() const;
  int64_t finish_interleaved(const std::string& failure);

  // report_files.cpp: the JSON and CSV files.
  // The columns every row starts with; "algo" only when given (normal mode).
  Json key_json(const RowKey& key, const std::string& algo) const;
  Json to_json(const Row& row) const;
  Json interleaved_json(const InterleavedRow& row) const;
  void write_csv_row(const Json& row);
  void close_files();

  const Options& opts_;
  int rank_;
  int nranks_;
  std::ofstream json_;
  std::ofstream csv_;
  bool csv_header_written_ = false;
  int64_t rows_added_ = 0;
  Json rows_ = Json::array();
  int64_t wrong_ = 0;
  int64_t mpi_wrong_ = 0;
  double busbw_sum_ = 0;
  double mpi_busbw_sum_ = 0;
  int busbw_n_ = 0;
  double log_speedup_sum_ = 0;
  int speedup_n_ = 0;
  uint64_t skips_ = 0;
  uint64_t late_ = 0;
  // Interleaved modes, indexed by Variant.
  int64_t variant_wrong_[kVariantCount] = {0, 0, 0};
  uint64_t variant_skips_[kVariantCount] = {0, 0, 0};
  uint64_t variant_late_[kVariantCount] = {0, 0, 0};
  GeoMean skip_over_ring_;
  GeoMean skip_over_mpi_;
};

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_REPORT_H_
