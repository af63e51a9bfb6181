// skipring_bench datatypes and reductions: the tables and the parsing of their names.
#include "apps/bench/datatypes.h"

#include <cctype>
#include <sstream>
#include <stdexcept>

#include "common/text.h"

namespace skipring_bench {
namespace {

// The canonical name of a datatype alias ("int" -> "int32"); other names unchanged.
std::string canonical_type_name(const std::string& name) {
  if (name == "char") return "int8";
  if (name == "uchar" || name == "byte") return "uint8";
  if (name == "short") return "int16";
  if (name == "int") return "int32";
  if (name == "uint") return "uint32";
  if (name == "float32") return "float";
  if (name == "float64") return "double";
  return name;
}

}  // namespace

const std::vector<TypeDesc>& all_types() {
  static const std::vector<TypeDesc> kTypes = {
      {TypeId::kInt8, "int8", MPI_INT8_T},    {TypeId::kUint8, "uint8", MPI_UINT8_T},
      {TypeId::kInt16, "int16", MPI_INT16_T}, {TypeId::kUint16, "uint16", MPI_UINT16_T},
      {TypeId::kInt32, "int32", MPI_INT32_T}, {TypeId::kUint32, "uint32", MPI_UINT32_T},
      {TypeId::kInt64, "int64", MPI_INT64_T}, {TypeId::kUint64, "uint64", MPI_UINT64_T},
      {TypeId::kFloat, "float", MPI_FLOAT},   {TypeId::kDouble, "double", MPI_DOUBLE},
  };
  return kTypes;
}

const std::vector<OpDesc>& all_ops() {
  static const std::vector<OpDesc> kOps = {
      {OpId::kSum, "sum", MPI_SUM},    {OpId::kProd, "prod", MPI_PROD},
      {OpId::kMin, "min", MPI_MIN},    {OpId::kMax, "max", MPI_MAX},
      {OpId::kBand, "band", MPI_BAND}, {OpId::kBor, "bor", MPI_BOR},
      {OpId::kBxor, "bxor", MPI_BXOR}, {OpId::kLand, "land", MPI_LAND},
      {OpId::kLor, "lor", MPI_LOR},    {OpId::kLxor, "lxor", MPI_LXOR},
  };
  return kOps;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    if (b != std::string::npos) items.push_back(skipring::to_lower(item.substr(b, e - b + 1)));
  }
  return items;
}

std::vector<TypeDesc> resolve_types(const std::string& text) {
  std::vector<TypeDesc> out;
  for (const std::string& item : split_list(text)) {
    if (item == "all") return all_types();
    const std::string name = canonical_type_name(item);
    bool found = false;
    for (const TypeDesc& t : all_types()) {
      if (name == t.name) {
        out.push_back(t);
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("unknown datatype '" + name + "'");
  }
  if (out.empty()) throw std::invalid_argument("no datatype given");
  return out;
}

std::vector<OpDesc> resolve_ops(const std::string& text) {
  std::vector<OpDesc> out;
  for (const std::string& name : split_list(text)) {
    if (name == "all") return all_ops();
    bool found = false;
    for (const OpDesc& o : all_ops()) {
      if (name == o.name) {
        out.push_back(o);
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("unknown reduction '" + name + "'");
  }
  if (out.empty()) throw std::invalid_argument("no reduction given");
  return out;
}

std::string type_names() {
  std::string s;
  for (const TypeDesc& t : all_types()) s += std::string(s.empty() ? "" : ", ") + t.name;
  return s;
}

std::string op_names() {
  std::string s;
  for (const OpDesc& o : all_ops()) s += std::string(s.empty() ? "" : ", ") + o.name;
  return s;
}

}  // namespace skipring_bench
