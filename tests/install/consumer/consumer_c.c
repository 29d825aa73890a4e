/* Built with pkg-config's flags for perserve (the C ABI): joins as a bystander
 * beside the consumer's actor and learner. */
#include <mpi.h>
#include <stdio.h>

#include <perserve/client_c.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = perserve_bystander_join(MPI_Comm_c2f(MPI_COMM_WORLD));
  if (code != 0) fprintf(stderr, "consumer_c: %s\n", perserve_client_last_error());
  MPI_Finalize();
  return code;
}
