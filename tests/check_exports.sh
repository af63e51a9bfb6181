#!/usr/bin/env bash
# The shared libraries export only what is meant to be used from outside (issue 12):
#   libskipring.so: the C API (skipring_*, runtime/include/skipring/skipring.h) and the
#     entry points libskipring_pmpi.so calls (SKIPRING_INTERNAL_API: runtime/config.h's
#     configuration, runtime/api_front.h's front path). The C++ API (skipring.hpp) is header-only: it adds no symbol.
#   libskipring_pmpi.so: the intercepted MPI functions (C and Fortran names; MPI_Wait and
#     MPI_Waitall in C only).
# Any other defined dynamic symbol fails the test (nm -D --defined-only, demangled).
#
# Usage: tests/check_exports.sh LIBSKIPRING_SO [LIBSKIPRING_PMPI_SO]
set -euo pipefail
lib="$1"
pmpi="${2:-}"

# Names the linker itself defines in every shared object.
linker='^(_init|_fini|_edata|_end|__bss_start)$'
skipring_allowed='^(skipring_[a-z0-9_]+|skipring::(global_config|load_config|process_env|allreduce_front_path|allreduce_front_remember)(\[abi:[a-z0-9]+\])?\(.*|skipring::g_front)$'
pmpi_allowed='^(MPI_(Allreduce|Iallreduce|Wait|Waitall|Init|Init_thread|Finalize|ALLREDUCE|INIT|INIT_THREAD|FINALIZE)|MPI_(Reduce_scatter_block|Reduce_scatter|Allgather|Bcast|Reduce|REDUCE_SCATTER_BLOCK|REDUCE_SCATTER|ALLGATHER|BCAST|REDUCE)|mpi_(allreduce|init|init_thread|finalize|reduce_scatter_block|reduce_scatter|allgather|bcast|reduce)_{0,2}|mpi_(init|init_thread|finalize)_f08_|ompi_(allreduce|init|init_thread|finalize|reduce_scatter_block|reduce_scatter|allgather|bcast|reduce)_f)$'

check() {
  local so="$1" allowed="$2"
  local symbols bad total
  symbols="$(nm -D --defined-only "$so" | awk 'NF >= 3 {print $3}' | c++filt)"
  total="$(printf '%s\n' "$symbols" | grep -c . || true)"
  bad="$(printf '%s\n' "$symbols" | grep -vE "$linker" | grep -vE "$allowed" || true)"
  if [[ -n "$bad" ]]; then
    echo "check_exports: $so exports $(printf '%s\n' "$bad" | wc -l) unexpected symbols:"
    printf '%s\n' "$bad" | head -40
    return 1
  fi
  echo "check_exports: $so: $total exported symbols, all expected"
}

status=0
check "$lib" "$skipring_allowed" || status=1
if [[ -n "$pmpi" ]]; then
  check "$pmpi" "$pmpi_allowed" || status=1
fi
exit $status
