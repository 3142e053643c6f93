/* An MPI job's worth of traffic with every byte checked (issue 27: MPI jobs on
 * the test bed, tests/conformance/mpi_fabric.sh). Every rank exchanges a buffer
 * of each size with every other rank, several times; a buffer's bytes are a
 * pattern of (source rank, destination rank, size, iteration), so a byte from
 * the wrong sender, the wrong message, the wrong offset or an earlier round is
 * a mismatch. Then an allreduce whose sum is known. Rank 0 prints where every
 * rank ran (the address its verbs device serves, GID index 1: the script checks
 * the job spans the hosts, each rank at its host's address), then
 * one line with the totals:
 *   "mpi check: 4 ranks, N messages, B bytes and 3 allreduces of E checked, 0 mismatches"
 * and the job exits 0; any mismatch exits 1 (MPI_Abort). */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int kSizes[] = {1, 100, 4096, 65536 + 3, 1 << 20, (4 << 20) - 5};
#define NUM_SIZES ((int)(sizeof kSizes / sizeof kSizes[0]))
#define ITERATIONS 3
#define REDUCE_COUNT (256 * 1024)

/* Byte `i` of the message from `src` to `dst` of `size` bytes in `iteration`:
 * a multiplicative hash, so neighbouring bytes and messages differ. */
static uint8_t pattern(int src, int dst, int size, int iteration, size_t i) {
  uint32_t seed = (uint32_t)src * 0x9E3779B9u ^ (uint32_t)dst * 0x7FEB352Du ^
                  (uint32_t)size * 0x85EBCA6Bu ^ (uint32_t)iteration * 0xC2B2AE35u;
  return (uint8_t)(((uint32_t)i * 2654435761u + seed) >> 24);
}

/* One round: a buffer of `size` bytes to and from every other rank at once
 * (nonblocking, so the sends of all pairs are in flight together). Returns the
 * number of mismatched bytes; adds the bytes checked to *checked. */
static long exchange(int rank, int ranks, int size, int iteration, uint8_t **send_buf,
                     uint8_t **recv_buf, MPI_Request *requests, long long *checked) {
  int n = 0;
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank) continue;
    for (int i = 0; i < size; ++i) send_buf[peer][i] = pattern(rank, peer, size, iteration, i);
    memset(recv_buf[peer], 0, size);
    MPI_Irecv(recv_buf[peer], size, MPI_BYTE, peer, iteration, MPI_COMM_WORLD, &requests[n++]);
  }
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank) continue;
    MPI_Isend(send_buf[peer], size, MPI_BYTE, peer, iteration, MPI_COMM_WORLD, &requests[n++]);
  }
  MPI_Waitall(n, requests, MPI_STATUSES_IGNORE);
  long mismatches = 0;
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank) continue;
    for (int i = 0; i < size; ++i) {
      if (recv_buf[peer][i] == pattern(peer, rank, size, iteration, i)) continue;
      if (mismatches++ == 0)
        fprintf(stderr,
                "rank %d: from rank %d, size %d, iteration %d: byte %d is 0x%02x, not 0x%02x\n",
                rank, peer, size, iteration, i, recv_buf[peer][i],
                pattern(peer, rank, size, iteration, i));
    }
    *checked += size;
  }
  return mismatches;
}

/* A sum of known value: element i of rank r is r * i + iteration, so the sum
 * is i * ranks * (ranks - 1) / 2 + ranks * iteration. Returns the wrong elements. */
static long check_allreduce(int rank, int ranks, int iteration, int64_t *in, int64_t *out) {
  for (int64_t i = 0; i < REDUCE_COUNT; ++i) in[i] = rank * i + iteration;
  MPI_Allreduce(in, out, REDUCE_COUNT, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  long wrong = 0;
  for (int64_t i = 0; i < REDUCE_COUNT; ++i) {
    int64_t expected = i * ranks * (ranks - 1) / 2 + (int64_t)ranks * iteration;
    if (out[i] != expected && wrong++ == 0)
      fprintf(stderr, "rank %d: allreduce element %lld is %lld, not %lld\n", rank, (long long)i,
              (long long)out[i], (long long)expected);
  }
  return wrong;
}

/* The IPv4 address the first verbs device serves (its IPv4-mapped GID at index 1,
 * decisions/gid-table.md) into `out`; "-" when there is none. */
static void device_address(char *out, size_t size) {
  snprintf(out, size, "-");
  int count = 0;
  struct ibv_device **list = ibv_get_device_list(&count);
  struct ibv_context *context = list != NULL && count > 0 ? ibv_open_device(list[0]) : NULL;
  union ibv_gid gid;
  if (context != NULL && ibv_query_gid(context, 1, 1, &gid) == 0)
    inet_ntop(AF_INET, gid.raw + 12, out, (socklen_t)size);
  if (context != NULL) ibv_close_device(context);
  if (list != NULL) ibv_free_device_list(list);
}

/* Rank 0 prints every rank's device address. */
static void report_placement(int rank, int ranks) {
  char mine[64];
  device_address(mine, sizeof mine);
  char *all = rank == 0 ? malloc((size_t)ranks * sizeof mine) : NULL;
  MPI_Gather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int r = 0; rank == 0 && r < ranks; ++r)
    printf("mpi check: rank %d at %s\n", r, all + r * sizeof mine);
  free(all);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  report_placement(rank, ranks);
  int largest = kSizes[NUM_SIZES - 1];
  uint8_t **send_buf = calloc(ranks, sizeof *send_buf),
          **recv_buf = calloc(ranks, sizeof *recv_buf);
  for (int peer = 0; peer < ranks; ++peer) {
    send_buf[peer] = malloc(largest);
    recv_buf[peer] = malloc(largest);
  }
  MPI_Request *requests = calloc(2 * ranks, sizeof *requests);
  int64_t *in = malloc(REDUCE_COUNT * sizeof *in), *out = malloc(REDUCE_COUNT * sizeof *out);
  long long checked = 0;
  long mismatches = 0;
  double start = MPI_Wtime();
  for (int iteration = 0; iteration < ITERATIONS; ++iteration) {
    for (int s = 0; s < NUM_SIZES; ++s)
      mismatches +=
          exchange(rank, ranks, kSizes[s], iteration, send_buf, recv_buf, requests, &checked);
    mismatches += check_allreduce(rank, ranks, iteration, in, out);
  }
  double seconds = MPI_Wtime() - start;
  long long totals[2] = {checked, mismatches}, sums[2];
  MPI_Reduce(totals, sums, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  long messages = (long)ranks * (ranks - 1) * NUM_SIZES * ITERATIONS;
  if (rank == 0)
    printf(
        "mpi check: %d ranks, %ld messages, %lld bytes and %d allreduces of %d checked, "
        "%lld mismatches (%.2f s)\n",
        ranks, messages, sums[0], ITERATIONS, REDUCE_COUNT, sums[1], seconds);
  fflush(stdout);
  if (mismatches != 0) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  return 0;
}
