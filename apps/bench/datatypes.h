// skipring_bench datatypes and reductions: the tables the command line names them from.
#ifndef SKIPRING_APPS_BENCH_DATATYPES_H_
#define SKIPRING_APPS_BENCH_DATATYPES_H_

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/dtype.h"

namespace skipring_bench {

// The element types and reductions are the library's own (collectives/dtype.h); which
// reduction applies to which type is skipring::op_valid's.
using TypeId = skipring::DType;
using OpId = skipring::ROp;

struct TypeDesc {
  TypeId id;
  const char* name;
  MPI_Datatype mpi;
};

struct OpDesc {
  OpId id;
  const char* name;
  MPI_Op mpi;
};

const std::vector<TypeDesc>& all_types();
const std::vector<OpDesc>& all_ops();

// Comma-separated items, blanks trimmed, lower-cased; empty items dropped.
std::vector<std::string> split_list(const std::string& text);

// Resolves "float,int32", "all" and aliases (char, int, uint, float32, float64, ...); throws
// std::invalid_argument naming an unknown datatype, or when none is given.
std::vector<TypeDesc> resolve_types(const std::string& text);
// Resolves "sum,max" or "all"; throws std::invalid_argument like resolve_types.
std::vector<OpDesc> resolve_ops(const std::string& text);

// "int8, uint8, ..." and "sum, prod, ...", for --help.
std::string type_names();
std::string op_names();

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_DATATYPES_H_
