/* The anchor for netgauge's tables: ping-pong half round-trip (p50, min,
 * us) and streaming bandwidth (MB/s, 10^6 bytes/s) between ranks 0 and 1
 * over Open MPI's own transport (run it with --mca btl self,tcp for the
 * TCP BTL). Sizes 8 B .. MAX doubling. Output: one line per size, also as
 * JSON with --json. Built by scripts/ompi-pingpong.
 *
 * Usage: mpirun -np 2 ompi-pingpong [--json] [ITERATIONS] [MAX_BYTES]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int json = 0, argi = 1;
    if (argc > argi && strcmp(argv[argi], "--json") == 0) { json = 1; argi++; }
    int iters = argc > argi ? atoi(argv[argi]) : 1000;
    long max = argc > argi + 1 ? atol(argv[argi + 1]) : 65536;
    if (size < 2 || iters < 1 || max < 8) {
        if (rank == 0) fprintf(stderr, "ompi-pingpong: needs -np >= 2, ITERATIONS >= 1, MAX_BYTES >= 8\n");
        MPI_Finalize();
        return 2;
    }
    char *buf = malloc(max);
    memset(buf, 0xa5, max);
    double *lat = malloc(sizeof(double) * iters);
    const int warmup = iters / 10 + 1, window = 64;
    MPI_Request reqs[64];
    if (rank == 0 && !json) printf("# size(B)  p50(us)  min(us)  MB/s   (Open MPI, ranks 0<->1)\n");
    for (long n = 8; n <= max; n *= 2) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = -warmup; i < iters; i++) {
            if (rank == 0) {
                double t0 = MPI_Wtime();
                MPI_Send(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (i >= 0) lat[i] = (MPI_Wtime() - t0) * 1e6 / 2;
            } else if (rank == 1) {
                MPI_Recv(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        /* Bandwidth (osu_bw style): windows of nonblocking sends, acked. */
        int rounds = iters / window + 1;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int r = 0; r < rounds; r++) {
            if (rank == 0) {
                for (int w = 0; w < window; w++)
                    MPI_Isend(buf, n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                MPI_Recv(buf, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(buf, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                MPI_Send(buf, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
            }
        }
        double secs = MPI_Wtime() - t0;
        if (rank == 0) {
            qsort(lat, iters, sizeof(double), cmp);
            double mbs = (double)n * window * rounds / secs / 1e6;
            if (json)
                printf("{\"mode\":\"ompi-tcp\",\"size\":%ld,\"iterations\":%d,\"p50_us\":%.3f,\"min_us\":%.3f,\"mb_s\":%.2f}\n",
                       n, iters, lat[iters / 2], lat[0], mbs);
            else
                printf("%-9ld %8.2f %8.2f %8.2f\n", n, lat[iters / 2], lat[0], mbs);
            fflush(stdout);
        }
    }
    free(lat);
    free(buf);
    MPI_Finalize();
    return 0;
}
