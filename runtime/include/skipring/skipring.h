/* skipring C API: a straggler-tolerant ring all-reduce for MPI programs.
 *
 * All functions return MPI error codes (MPI_SUCCESS on success; MPI_ERR_NO_MEM when memory
 * runs out, MPI_ERR_OTHER on an internal error) and never throw. Called before MPI_Init or
 * after MPI_Finalize, every function that needs MPI returns MPI_ERR_OTHER and logs
 * "<function> called before MPI_Init" / "after MPI_Finalize", making no MPI call (MPI itself
 * would abort the job); skipring_get_totals, skipring_count_fallback and skipring_finalize
 * work at any time. A rejected argument is logged (one error line naming the function and
 * the reason) and changes nothing: the communicator stays usable.
 * Thread support: call from one thread at a time per communicator (MPI_THREAD_FUNNELED
 * or SERIALIZED usage). */
#ifndef SKIPRING_SKIPRING_H_
#define SKIPRING_SKIPRING_H_

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKIPRING_VERSION_MAJOR 0
#define SKIPRING_VERSION_MINOR 1
#define SKIPRING_VERSION_PATCH 0

/* Marks the functions libskipring exports (it is built with hidden visibility otherwise). */
#if defined(__GNUC__) || defined(__clang__)
#define SKIPRING_API __attribute__((visibility("default")))
#else
#define SKIPRING_API
#endif

/* Reads and validates every SKIPRING_* variable. Called implicitly by the first
 * skipring_allreduce; call it after MPI_Init to get configuration errors early.
 * Returns MPI_ERR_ARG (and logs a message naming the variable) on a bad value. */
SKIPRING_API int skipring_init(void);

/* Same semantics as MPI_Allreduce, including MPI_IN_PLACE as sendbuf. Handles predefined
 * ops on predefined integer, floating, bool and byte types on intra-communicators natively;
 * for user-defined ops, MAXLOC/MINLOC, derived/complex datatypes and inter-communicators it
 * calls PMPI_Allreduce (counted as a fallback). Errors: MPI_ERR_COUNT (count < 0),
 * MPI_ERR_BUFFER (NULL buffer, count > 0; recvbuf == MPI_IN_PLACE, with or without sendbuf
 * MPI_IN_PLACE; sendbuf == recvbuf with count > 0, which MPI forbids: pass MPI_IN_PLACE as
 * sendbuf instead; these are checked before any fallback and are Open MPI 4.1's codes, though
 * Open MPI itself lets an aliased count of 1 through), MPI_ERR_OP (op not defined on the type),
 * MPI_ERR_COMM (MPI_COMM_NULL), MPI_ERR_OTHER (internal / protocol error; MPI not active). */
SKIPRING_API int skipring_allreduce(const void* sendbuf, void* recvbuf, int count,
                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

/* The other collectives, with the same semantics and argument conventions as their MPI
 * namesakes (MPI_IN_PLACE where MPI allows it), run on skipring's engine without skip-ahead:
 * reduce-scatter and allgather as rings, broadcast and reduce as pipelined chains along the
 * ring (SKIPRING_SEGMENT_BYTES segments). Results are identical on every rank and from run to
 * run. Like skipring_allreduce they call the PMPI_ function for what they do not handle
 * natively (user ops, derived types, inter-communicators; allgather with different send and
 * receive types or counts) and return MPI error codes: MPI_ERR_COMM, MPI_ERR_COUNT (negative
 * count), MPI_ERR_BUFFER (NULL buffer with count > 0; sendbuf == recvbuf with count > 0 in
 * reduce-scatter and allgather, which Open MPI does not check), MPI_ERR_ARG (as Open MPI 4.1
 * for the same calls: recvbuf == MPI_IN_PLACE in reduce-scatter, allgather and at the root of
 * reduce; buffer == MPI_IN_PLACE in bcast; sendbuf == recvbuf at the root of reduce;
 * sendbuf == MPI_IN_PLACE at a non-root of reduce), MPI_ERR_ROOT (root outside the
 * communicator), MPI_ERR_OP, MPI_ERR_OTHER. A non-root of reduce may pass anything as recvbuf.
 * Argument errors must be the same on every rank (as in MPI), or the others wait in the
 * collective. */
SKIPRING_API int skipring_reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
SKIPRING_API int skipring_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                    void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                    MPI_Comm comm);
SKIPRING_API int skipring_bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                MPI_Comm comm);
SKIPRING_API int skipring_reduce(const void* sendbuf, void* recvbuf, int count,
                                 MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm);

/* skipring's 16-bit floating-point datatypes: IEEE 754 binary16 and bfloat16, for
 * skipring_allreduce, skipring_reduce_scatter_block and skipring_reduce with MPI_SUM, MPI_PROD,
 * MPI_MIN and MPI_MAX (and as 2-byte elements for skipring_bcast / skipring_allgather). Each
 * operation widens both operands to float, applies the float operation and rounds to nearest,
 * ties to even; a NaN result is the default quiet NaN (0x7E00 / 0x7FC0). MPI names no such
 * types (MPICH's MPIX_C_FLOAT16 is accepted as binary16 too): to MPI these are committed
 * contiguous pairs of bytes, which PMPI cannot reduce, so a reduction that would fall back
 * (SKIPRING_ENABLE=0, an inter-communicator, device buffers without a device path) returns
 * MPI_ERR_TYPE instead. MPI_DATATYPE_NULL when MPI is not initialized or already finalized.
 * Created on first use and kept: do not free them. */
SKIPRING_API MPI_Datatype skipring_type_float16(void);
SKIPRING_API MPI_Datatype skipring_type_bfloat16(void);

/* 1 in *handled when skipring runs (datatype, op, comm) itself, 0 when it would fall back. */
SKIPRING_API int skipring_handles(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, int* handled);

/* Statistics of the last skipring_allreduce on a communicator (this rank's view). */
typedef struct skipring_stats {
  uint64_t seq;      /* collective sequence number on this communicator */
  uint64_t bytes;    /* count * datatype size */
  double time_s;     /* wall time of the call (0 for recursive doubling, which runs
                        straight on MPI and does not time itself) */
  double wait_s;     /* total time waiting for a predecessor's data */
  double reduce_s;   /* total time in reduction kernels */
  double transfer_s; /* total time from posting a send until it completed */
  uint32_t steps;    /* ring steps this rank took part in (reduce-scatter + allgather) */
  uint32_t messages_sent;
  uint32_t messages_received;
  uint32_t skips;            /* skip-ahead decisions taken by this rank */
  uint32_t late_pieces;      /* pieces that arrived after this rank had forwarded */
  int32_t slowest_neighbour; /* rank this rank waited for longest (-1: none) */
  double skip_threshold_s;   /* skip-ahead threshold used: alpha*T + T_trans (0: off) */
  double rs_time_s;          /* start of the call until this rank's last reduce-scatter step
                                ended (its own chunk complete); 0: no reduce-scatter phase */
  char algo[16];             /* algorithm that ran: "ring", "skipring", "rd", "rabenseifner",
                                "tree", "multitree", "hier" ("" before any all-reduce) */
  uint32_t direct_segments;  /* segments of its own chunk this rank sent straight to every
                                rank after a straggler (SKIPRING_DIRECT_ALLGATHER) */
} skipring_stats_t;

SKIPRING_API int skipring_last_stats(MPI_Comm comm, skipring_stats_t* stats);

/* Process-wide counters since init (what the PMPI report line prints). */
typedef struct skipring_totals {
  uint64_t calls;     /* all-reduces skipring ran itself */
  uint64_t fallbacks; /* calls handed to PMPI_Allreduce */
  uint64_t skips;
  uint64_t late;
  uint64_t bytes;
  double time_s;
} skipring_totals_t;

SKIPRING_API int skipring_get_totals(skipring_totals_t* totals);
/* Adds one fallback to the totals (used by the PMPI library). */
SKIPRING_API void skipring_count_fallback(void);

/* Test aid: *pending = 1 when a message is waiting unmatched on skipring's internal
 * communicator for `comm` (there must be none between collectives). */
SKIPRING_API int skipring_pending_messages(MPI_Comm comm, int* pending);

/* Replaces the straggler-injection plan (same syntax as SKIPRING_INJECT; NULL or "" clears
 * it) for every communicator, from the next collective on. MPI_ERR_ARG on a bad spec (the
 * logged message names the offending part; the plan in force is kept): a rank outside
 * MPI_COMM_WORLD, a duration that is not finite or above 1 hour, a lognormal SIGMA above 10
 * (draws are capped at 1 hour). SKIPRING_INJECT is checked the same way at init. */
SKIPRING_API int skipring_set_inject(const char* spec);

/* Turns skip-ahead on (1) or off (0, plain ring: run-to-run identical results) for every
 * communicator, from the next collective on; overrides SKIPRING_SKIP. */
SKIPRING_API int skipring_set_skip(int enabled);

/* Forces the all-reduce algorithm ("auto", "ring", "skipring", "rd", "rabenseifner", "tree",
 * "multitree", "hier"; NULL: back to SKIPRING_ALGO) for every communicator, from the next
 * collective on; overrides SKIPRING_ALGO. Every rank must make the same call (the choice must
 * agree across ranks). MPI_ERR_ARG on an unknown name. */
SKIPRING_API int skipring_set_algo(const char* name);

/* Frees all per-communicator state. Called automatically at MPI_Finalize. */
SKIPRING_API int skipring_finalize(void);

/* Human-readable text for an MPI or skipring error code. */
SKIPRING_API const char* skipring_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif /* SKIPRING_SKIPRING_H_ */
