// Maps predefined MPI datatype and reduction-op handles to skipring's DType / ROp.
#include "runtime/mpi_types.h"

#include <atomic>
#include <mutex>
#include <type_traits>

namespace skipring {
namespace {

// DType of a C integer type, chosen by its size and signedness; kCount if none fits.
template <typename T>
constexpr DType integer_dtype() {
  static_assert(std::is_integral_v<T>, "integer types only");
  if constexpr (std::is_signed_v<T>) {
    switch (sizeof(T)) {
      case 1:
        return DType::kInt8;
      case 2:
        return DType::kInt16;
      case 4:
        return DType::kInt32;
      case 8:
        return DType::kInt64;
      default:
        return DType::kCount;
    }
  } else {
    switch (sizeof(T)) {
      case 1:
        return DType::kUint8;
      case 2:
        return DType::kUint16;
      case 4:
        return DType::kUint32;
      case 8:
        return DType::kUint64;
      default:
        return DType::kCount;
    }
  }
}

bool set_if_known(DType d, DType* out) {
  if (d == DType::kCount) return false;
  *out = d;
  return true;
}

// Between MPI_Init and MPI_Finalize (MPI calls are not allowed outside). PMPI_ entry points
// because this library may itself be a PMPI interposer.
bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  return PMPI_Initialized(&initialized) == MPI_SUCCESS && initialized &&
         PMPI_Finalized(&finalized) == MPI_SUCCESS && !finalized;
}

// Size of a Fortran type, which only the MPI library knows; "unknown" (0) outside MPI.
int fortran_type_size(MPI_Datatype t) {
  if (!mpi_active()) return 0;
  int size = 0;
  if (PMPI_Type_size(t, &size) != MPI_SUCCESS) return 0;
  return size;
}

// True when a pair type's extent is the C struct's (skipring's element stride): always, as far
// as the MPIs tried go, but a pair whose layout differs is left to the MPI library. "Matches"
// outside MPI, where nothing can be asked and no call can be made.
bool extent_is(MPI_Datatype t, DType d) {
  if (!mpi_active()) return true;
  MPI_Aint lb = 0, extent = 0;
  return PMPI_Type_get_extent(t, &lb, &extent) == MPI_SUCCESS && lb == 0 &&
         static_cast<size_t>(extent) == dtype_size(d);
}

bool set_pair(MPI_Datatype t, DType d, DType* out) {
  return extent_is(t, d) && set_if_known(d, out);
}

// The 16-bit float extension types, once created (MPI_DATATYPE_NULL before).
std::atomic<MPI_Datatype> g_float16{MPI_DATATYPE_NULL};
std::atomic<MPI_Datatype> g_bfloat16{MPI_DATATYPE_NULL};
std::mutex g_extension_mutex;

}  // namespace

MPI_Datatype extension_type(DType t) {
  if (t != DType::kFloat16 && t != DType::kBfloat16) return MPI_DATATYPE_NULL;
  std::atomic<MPI_Datatype>& slot = t == DType::kFloat16 ? g_float16 : g_bfloat16;
  MPI_Datatype existing = slot.load(std::memory_order_acquire);
  if (existing != MPI_DATATYPE_NULL) return existing;
  std::lock_guard<std::mutex> lock(g_extension_mutex);
  existing = slot.load(std::memory_order_acquire);
  if (existing != MPI_DATATYPE_NULL || !mpi_active()) return existing;
  MPI_Datatype created = MPI_DATATYPE_NULL;
  if (PMPI_Type_contiguous(2, MPI_BYTE, &created) != MPI_SUCCESS) return MPI_DATATYPE_NULL;
  if (PMPI_Type_commit(&created) != MPI_SUCCESS) {
    PMPI_Type_free(&created);
    return MPI_DATATYPE_NULL;
  }
  char name[] = "SKIPRING_FLOAT16";
  char bname[] = "SKIPRING_BFLOAT16";
  PMPI_Type_set_name(created, t == DType::kFloat16 ? name : bname);
  slot.store(created, std::memory_order_release);
  return created;
}

bool is_extension_type(MPI_Datatype t) {
  return t != MPI_DATATYPE_NULL && (t == g_float16.load(std::memory_order_acquire) ||
                                    t == g_bfloat16.load(std::memory_order_acquire));
}

bool dtype_from_mpi(MPI_Datatype t, DType* out) {
  // Guards handles that an MPI without Fortran support may define as MPI_DATATYPE_NULL.
  if (out == nullptr || t == MPI_DATATYPE_NULL) return false;

  // skipring's 16-bit floats (and MPICH's own float16).
  if (t == g_float16.load(std::memory_order_acquire)) return set_if_known(DType::kFloat16, out);
  if (t == g_bfloat16.load(std::memory_order_acquire)) return set_if_known(DType::kBfloat16, out);
#ifdef MPIX_C_FLOAT16
  if (t == MPIX_C_FLOAT16) return set_if_known(DType::kFloat16, out);
#endif

  // C integer types. MPI_CHAR and MPI_WCHAR are not valid for reductions (MPI-3.1 5.9.2),
  // so they are deliberately absent.
  if (t == MPI_SIGNED_CHAR) return set_if_known(integer_dtype<signed char>(), out);
  if (t == MPI_UNSIGNED_CHAR) return set_if_known(integer_dtype<unsigned char>(), out);
  if (t == MPI_SHORT) return set_if_known(integer_dtype<short>(), out);
  if (t == MPI_UNSIGNED_SHORT) return set_if_known(integer_dtype<unsigned short>(), out);
  if (t == MPI_INT) return set_if_known(integer_dtype<int>(), out);
  if (t == MPI_UNSIGNED) return set_if_known(integer_dtype<unsigned>(), out);
  if (t == MPI_LONG) return set_if_known(integer_dtype<long>(), out);
  if (t == MPI_UNSIGNED_LONG) return set_if_known(integer_dtype<unsigned long>(), out);
  if (t == MPI_LONG_LONG_INT || t == MPI_LONG_LONG) {
    return set_if_known(integer_dtype<long long>(), out);
  }
  if (t == MPI_UNSIGNED_LONG_LONG) return set_if_known(integer_dtype<unsigned long long>(), out);
  if (t == MPI_INT8_T) return set_if_known(DType::kInt8, out);
  if (t == MPI_UINT8_T) return set_if_known(DType::kUint8, out);
  if (t == MPI_INT16_T) return set_if_known(DType::kInt16, out);
  if (t == MPI_UINT16_T) return set_if_known(DType::kUint16, out);
  if (t == MPI_INT32_T) return set_if_known(DType::kInt32, out);
  if (t == MPI_UINT32_T) return set_if_known(DType::kUint32, out);
  if (t == MPI_INT64_T) return set_if_known(DType::kInt64, out);
  if (t == MPI_UINT64_T) return set_if_known(DType::kUint64, out);

  // C floating point.
  if (t == MPI_FLOAT) return set_if_known(DType::kFloat, out);
  if (t == MPI_DOUBLE) return set_if_known(DType::kDouble, out);
  if (t == MPI_LONG_DOUBLE) return set_if_known(DType::kLongDouble, out);

  // Logical and byte.
  if (t == MPI_C_BOOL) {
    static_assert(sizeof(bool) == 1, "DType::kBool is one byte");
    return set_if_known(DType::kBool, out);
  }
  if (t == MPI_BYTE) return set_if_known(DType::kByte, out);

  // C complex types (and C++'s, where the MPI defines them: the same layouts).
  if (t == MPI_C_FLOAT_COMPLEX || t == MPI_C_COMPLEX)
    return set_if_known(DType::kComplexFloat, out);
  if (t == MPI_C_DOUBLE_COMPLEX) return set_if_known(DType::kComplexDouble, out);
  if (t == MPI_C_LONG_DOUBLE_COMPLEX) return set_if_known(DType::kComplexLongDouble, out);
#if !defined(SKIPRING_SIMGRID)  // SimGrid's smpi.h defines these to symbols it never declares
#ifdef MPI_CXX_FLOAT_COMPLEX
  if (t == MPI_CXX_FLOAT_COMPLEX) return set_if_known(DType::kComplexFloat, out);
#endif
#ifdef MPI_CXX_DOUBLE_COMPLEX
  if (t == MPI_CXX_DOUBLE_COMPLEX) return set_if_known(DType::kComplexDouble, out);
#endif
#ifdef MPI_CXX_LONG_DOUBLE_COMPLEX
  if (t == MPI_CXX_LONG_DOUBLE_COMPLEX) return set_if_known(DType::kComplexLongDouble, out);
#endif
#endif

  // C MINLOC/MAXLOC pair types.
  if (t == MPI_FLOAT_INT) return set_pair(t, DType::kFloatInt, out);
  if (t == MPI_DOUBLE_INT) return set_pair(t, DType::kDoubleInt, out);
  if (t == MPI_LONG_INT) return set_pair(t, DType::kLongInt, out);
  if (t == MPI_2INT) return set_pair(t, DType::kIntInt, out);
  if (t == MPI_SHORT_INT) return set_pair(t, DType::kShortInt, out);
  if (t == MPI_LONG_DOUBLE_INT) return set_pair(t, DType::kLongDoubleInt, out);

  // Fortran types: their size depends on how the MPI library (and the Fortran compiler
  // flags it was built with) define them.
  // INTEGER, the sized kinds (INTEGER*8, ...: what codes built with explicit kinds send; a DFT
  // code, CP2K, sends mostly MPI_INTEGER8) and LOGICAL (logical ops only, classify_reduction;
  // gfortran's .TRUE. is 1, what the logical kernels write, as Open MPI's and MPICH's do).
  if (t == MPI_INTEGER || t == MPI_INTEGER1 || t == MPI_INTEGER2 || t == MPI_INTEGER4 ||
      t == MPI_INTEGER8 || t == MPI_LOGICAL) {
    switch (fortran_type_size(t)) {
      case 1:
        return set_if_known(DType::kInt8, out);
      case 2:
        return set_if_known(DType::kInt16, out);
      case 4:
        return set_if_known(DType::kInt32, out);
      case 8:
        return set_if_known(DType::kInt64, out);
      default:
        return false;
    }
  }
  if (t == MPI_REAL4) return fortran_type_size(t) == 4 && set_if_known(DType::kFloat, out);
  if (t == MPI_REAL8) return fortran_type_size(t) == 8 && set_if_known(DType::kDouble, out);
  if (t == MPI_REAL) {
    switch (fortran_type_size(t)) {
      case 4:
        return set_if_known(DType::kFloat, out);
      case 8:
        return set_if_known(DType::kDouble, out);  // e.g. built with -fdefault-real-8
      default:
        return false;
    }
  }
  if (t == MPI_DOUBLE_PRECISION) {
    // 16 bytes would be IEEE quad, which is not the x87 long double: not supported.
    return fortran_type_size(t) == 8 && set_if_known(DType::kDouble, out);
  }
  // COMPLEX is two REALs, DOUBLE COMPLEX two DOUBLE PRECISIONs; COMPLEX8 / COMPLEX16 two
  // REAL*4 / REAL*8 (32 bytes would be two quads: not supported).
  if (t == MPI_COMPLEX || t == MPI_DOUBLE_COMPLEX || t == MPI_COMPLEX8 || t == MPI_COMPLEX16) {
    switch (fortran_type_size(t)) {
      case 8:
        return set_if_known(DType::kComplexFloat, out);
      case 16:
        return set_if_known(DType::kComplexDouble, out);
      default:
        return false;
    }
  }
  // Fortran MINLOC/MAXLOC pairs: value and index both of the Fortran type.
  if (t == MPI_2REAL || t == MPI_2DOUBLE_PRECISION) {
    switch (fortran_type_size(t)) {
      case 8:
        return set_pair(t, DType::kFloatFloat, out);
      case 16:
        return set_pair(t, DType::kDoubleDouble, out);
      default:
        return false;
    }
  }
  if (t == MPI_2INTEGER) {
    // 16 bytes (an 8-byte INTEGER) has no DType: the MPI library's.
    return fortran_type_size(t) == 8 && set_pair(t, DType::kIntInt, out);
  }
  return false;
}

bool rop_from_mpi(MPI_Op op, ROp* out) {
  if (out == nullptr || op == MPI_OP_NULL) return false;
  ROp r;
  if (op == MPI_SUM) {
    r = ROp::kSum;
  } else if (op == MPI_PROD) {
    r = ROp::kProd;
  } else if (op == MPI_MIN) {
    r = ROp::kMin;
  } else if (op == MPI_MAX) {
    r = ROp::kMax;
  } else if (op == MPI_LAND) {
    r = ROp::kLand;
  } else if (op == MPI_LOR) {
    r = ROp::kLor;
  } else if (op == MPI_LXOR) {
    r = ROp::kLxor;
  } else if (op == MPI_BAND) {
    r = ROp::kBand;
  } else if (op == MPI_BOR) {
    r = ROp::kBor;
  } else if (op == MPI_BXOR) {
    r = ROp::kBxor;
  } else if (op == MPI_MINLOC) {
    r = ROp::kMinloc;
  } else if (op == MPI_MAXLOC) {
    r = ROp::kMaxloc;
  } else {
    return false;  // REPLACE, NO_OP, user-defined ops
  }
  *out = r;
  return true;
}

MpiReduction classify_reduction(MPI_Datatype datatype, MPI_Op op, DType* dt, ROp* rop) {
  if (!dtype_from_mpi(datatype, dt) || !rop_from_mpi(op, rop)) return MpiReduction::kOther;
  // LOGICAL maps onto an integer of its size, but MPI defines only the logical ops on it.
  if (datatype == MPI_LOGICAL && *rop != ROp::kLand && *rop != ROp::kLor && *rop != ROp::kLxor) {
    return MpiReduction::kUndefined;
  }
  return op_valid(*rop, *dt) ? MpiReduction::kNative : MpiReduction::kUndefined;
}

}  // namespace skipring
