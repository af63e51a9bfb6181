// The topology's one collective: every rank's record to every rank (topology_gather.h).
#include "runtime/topology_gather.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "topology/affinity.h"

namespace skipring {

Status gather_topology(MPI_Comm comm, const std::string& host_map, const WaitPolicy& wait,
                       Topology* out, std::string* error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS) len = 0;
  RankRecord mine = local_record(std::string(name, static_cast<size_t>(std::max(len, 0))));
  mine.rank = rank;
  mine.host_map_hash = fnv1a64(host_map);
  // SKIPRING_GPU is per rank (not in the agreed Config): read here, carried in the record and
  // checked by build_topology against the host's GPUs on the gathered records.
  const char* gpu = std::getenv(kGpuEnvVar);
  mine.gpu_request = parse_gpu_request(gpu != nullptr ? gpu : "");
  std::vector<uint8_t> send(kRecordBytes);
  std::vector<uint8_t> all(kRecordBytes * static_cast<size_t>(size));
  encode_record(mine, send.data());
  MPI_Request req;
  WaitWhat what;
  what.what = "communicator setup: the topology all-gather";
  if (Status st = wait_collectives(
          MPI_Iallgather(send.data(), static_cast<int>(kRecordBytes), MPI_BYTE, all.data(),
                         static_cast<int>(kRecordBytes), MPI_BYTE, comm, &req),
          &req, 1, wait, what, error, &send, &all);
      !ok(st)) {
    if (st != Status::kErrTimeout) *error = "topology: MPI_Iallgather of the rank records failed";
    return st;
  }

  std::vector<RankRecord> records(size);
  for (int r = 0; r < size; ++r) {
    if (!decode_record(all.data() + kRecordBytes * r, kRecordBytes, &records[r], error)) {
      *error += " (from rank " + std::to_string(r) + ")";
      return Status::kErrInternal;
    }
  }
  return build_topology(std::move(records), host_map, out, error);
}

}  // namespace skipring
