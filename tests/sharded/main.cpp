// SPDX-License-Identifier: Apache-2.0
// doctest main for the tests run under mpirun: MPI_Init, run, the exit code agreed over
// the ranks (any rank failing fails every rank), MPI_Finalize.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("minimal", true);  // other ranks report failures only
  int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rc != 0) std::fprintf(stderr, "rank %d: %d test failure(s) exit code %d\n", rank, rc, rc);
  MPI_Finalize();
  return worst;
}
