// Element sizes, names and the MPI-3.1 (op, type) validity table for skipring's DType / ROp.
#include "collectives/dtype.h"

#include <climits>

#include "collectives/elem_types.h"

namespace skipring {

static_assert(sizeof(bool) == 1, "DType::kBool assumes a one-byte bool (C _Bool)");
static_assert(CHAR_BIT == 8, "skipring assumes 8-bit bytes");

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kInt8:
      return sizeof(int8_t);
    case DType::kUint8:
      return sizeof(uint8_t);
    case DType::kInt16:
      return sizeof(int16_t);
    case DType::kUint16:
      return sizeof(uint16_t);
    case DType::kInt32:
      return sizeof(int32_t);
    case DType::kUint32:
      return sizeof(uint32_t);
    case DType::kInt64:
      return sizeof(int64_t);
    case DType::kUint64:
      return sizeof(uint64_t);
    case DType::kFloat:
      return sizeof(float);
    case DType::kDouble:
      return sizeof(double);
    case DType::kLongDouble:
      return sizeof(long double);
    case DType::kBool:
      return sizeof(bool);
    case DType::kByte:
      return 1;
    case DType::kFloat16:
    case DType::kBfloat16:
      return 2;
    case DType::kComplexFloat:
      return sizeof(ComplexOf<float>);
    case DType::kComplexDouble:
      return sizeof(ComplexOf<double>);
    case DType::kComplexLongDouble:
      return sizeof(ComplexOf<long double>);
    case DType::kFloatInt:
      return sizeof(LocPair<float, int>);
    case DType::kDoubleInt:
      return sizeof(LocPair<double, int>);
    case DType::kLongInt:
      return sizeof(LocPair<long, int>);
    case DType::kIntInt:
      return sizeof(LocPair<int, int>);
    case DType::kShortInt:
      return sizeof(LocPair<short, int>);
    case DType::kLongDoubleInt:
      return sizeof(LocPair<long double, int>);
    case DType::kFloatFloat:
      return sizeof(LocPair<float, float>);
    case DType::kDoubleDouble:
      return sizeof(LocPair<double, double>);
    case DType::kCount:
      break;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kInt8:
      return "int8";
    case DType::kUint8:
      return "uint8";
    case DType::kInt16:
      return "int16";
    case DType::kUint16:
      return "uint16";
    case DType::kInt32:
      return "int32";
    case DType::kUint32:
      return "uint32";
    case DType::kInt64:
      return "int64";
    case DType::kUint64:
      return "uint64";
    case DType::kFloat:
      return "float";
    case DType::kDouble:
      return "double";
    case DType::kLongDouble:
      return "long double";
    case DType::kBool:
      return "bool";
    case DType::kByte:
      return "byte";
    case DType::kFloat16:
      return "float16";
    case DType::kBfloat16:
      return "bfloat16";
    case DType::kComplexFloat:
      return "complex float";
    case DType::kComplexDouble:
      return "complex double";
    case DType::kComplexLongDouble:
      return "complex long double";
    case DType::kFloatInt:
      return "float-int";
    case DType::kDoubleInt:
      return "double-int";
    case DType::kLongInt:
      return "long-int";
    case DType::kIntInt:
      return "int-int";
    case DType::kShortInt:
      return "short-int";
    case DType::kLongDoubleInt:
      return "long double-int";
    case DType::kFloatFloat:
      return "float-float";
    case DType::kDoubleDouble:
      return "double-double";
    case DType::kCount:
      break;
  }
  return "unknown";
}

const char* rop_name(ROp op) {
  switch (op) {
    case ROp::kSum:
      return "sum";
    case ROp::kProd:
      return "prod";
    case ROp::kMin:
      return "min";
    case ROp::kMax:
      return "max";
    case ROp::kLand:
      return "land";
    case ROp::kLor:
      return "lor";
    case ROp::kLxor:
      return "lxor";
    case ROp::kBand:
      return "band";
    case ROp::kBor:
      return "bor";
    case ROp::kBxor:
      return "bxor";
    case ROp::kMinloc:
      return "minloc";
    case ROp::kMaxloc:
      return "maxloc";
    case ROp::kCount:
      break;
  }
  return "unknown";
}

namespace {

enum class Category { kInteger, kFloating, kComplex, kPair, kLogical, kByte, kNone };

Category category(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUint8:
    case DType::kInt16:
    case DType::kUint16:
    case DType::kInt32:
    case DType::kUint32:
    case DType::kInt64:
    case DType::kUint64:
      return Category::kInteger;
    case DType::kFloat:
    case DType::kDouble:
    case DType::kLongDouble:
    case DType::kFloat16:
    case DType::kBfloat16:
      return Category::kFloating;
    case DType::kBool:
      return Category::kLogical;
    case DType::kByte:
      return Category::kByte;
    case DType::kComplexFloat:
    case DType::kComplexDouble:
    case DType::kComplexLongDouble:
      return Category::kComplex;
    case DType::kFloatInt:
    case DType::kDoubleInt:
    case DType::kLongInt:
    case DType::kIntInt:
    case DType::kShortInt:
    case DType::kLongDoubleInt:
    case DType::kFloatFloat:
    case DType::kDoubleDouble:
      return Category::kPair;
    case DType::kCount:
      break;
  }
  return Category::kNone;
}

}  // namespace

bool op_valid(ROp op, DType t) {
  const Category c = category(t);
  switch (op) {
    case ROp::kSum:
    case ROp::kProd:
      return c == Category::kInteger || c == Category::kFloating || c == Category::kComplex;
    case ROp::kMin:
    case ROp::kMax:
      return c == Category::kInteger || c == Category::kFloating;
    case ROp::kLand:
    case ROp::kLor:
    case ROp::kLxor:
      return c == Category::kInteger || c == Category::kLogical;
    case ROp::kBand:
    case ROp::kBor:
    case ROp::kBxor:
      return c == Category::kInteger || c == Category::kByte;
    case ROp::kMinloc:
    case ROp::kMaxloc:
      return c == Category::kPair;
    case ROp::kCount:
      break;
  }
  return false;
}

bool dtype_on_device(DType t) {
  const Category c = category(t);
  return c != Category::kNone && c != Category::kComplex && c != Category::kPair &&
         t != DType::kLongDouble;
}

}  // namespace skipring
