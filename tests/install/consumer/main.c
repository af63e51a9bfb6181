/* Consumer of an installed skipring: init, one all-reduce, check the result. */
#include <skipring/skipring.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  int rc = skipring_init();
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "skipring_init failed: %s\n", skipring_error_string(rc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  int value = rank + 1, sum = 0;
  rc = skipring_allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int expected = size * (size + 1) / 2;
  if (rc != MPI_SUCCESS || sum != expected) {
    fprintf(stderr, "skipring_allreduce: rc=%d (%s) sum=%d expected=%d\n", rc,
            skipring_error_string(rc), sum, expected);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    printf("skipring %d.%d.%d consumer ok (sum=%d over %d ranks)\n", SKIPRING_VERSION_MAJOR,
           SKIPRING_VERSION_MINOR, SKIPRING_VERSION_PATCH, sum, size);
  }
  MPI_Finalize();
  return 0;
}
