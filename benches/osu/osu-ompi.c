/* The five OSU-style benchmarks of comm-osu (comm-osu/src/bench.rs) on MPI,
 * for the comparison with Open MPI over TCP (scripts/osu-compare): the same
 * definitions, sizes, iteration counts and output format, as the OSU
 * micro-benchmarks (OMB 7.x: osu_latency, osu_bw, osu_bibw, osu_bcast,
 * osu_allreduce) define them. The OMB suite itself is not packaged in
 * Debian; this is a small re-implementation, not OMB.
 *
 *   mpicc -O2 -o osu-ompi benches/osu/osu-ompi.c
 *   mpirun -np 2 --mca btl self,tcp osu-ompi BENCH MIN MAX ITERS WARMUP WINDOW
 *
 * BENCH: latency | latency-p50 | bw | bibw | bcast | allreduce (latency-p50:
 * half the median round trip instead of OMB's mean). Sizes double from MIN
 * (raised to 0 for latency, 1 for bw/bibw/bcast, 8 for allreduce) to MAX
 * bytes; above 8192 bytes a tenth of ITERS and WARMUP. allreduce sums
 * MAX/8 doubles (comm sums i64 and f64; OMB sums floats). At the end, one
 * `# cpu rank R: user U sys S` line per rank: its CPU seconds over the
 * sizes (comm-osu --provider turns it into CPU per MiB moved). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define LARGE_MESSAGE_SIZE 8192

static int rank, size;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Half the mean round trip, or with p50 half the median one, us. */
/* User and system CPU time of this process so far, seconds. */
static void cpu_now(double t[2]) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    t[0] = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    t[1] = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static double latency(char *buf, long len, int iters, int warmup, int p50) {
    double start = 0, last = 0;
    double *rtt = p50 ? malloc(sizeof(double) * (size_t)iters) : NULL;
    int n = 0;
    if (p50 && !rtt) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + warmup; i++) {
        if (i == warmup) start = last = MPI_Wtime();
        if (p50 && i > warmup) {
            double now = MPI_Wtime();
            rtt[n++] = now - last;
            last = now;
        }
        if (rank == 0) {
            MPI_Send(buf, (int)len, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)len, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, (int)len, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)len, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    if (p50) {
        rtt[n++] = MPI_Wtime() - last;
        qsort(rtt, (size_t)n, sizeof(double), cmp_double);
        double v = rtt[n / 2] * 1e6 / 2.0;
        free(rtt);
        return v;
    }
    return (MPI_Wtime() - start) * 1e6 / (2.0 * iters);
}

static double bandwidth(char *sbuf, char *rbuf, long len, int iters, int warmup, int window,
                        int both) {
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * window);
    double start = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + warmup; i++) {
        if (i == warmup) start = MPI_Wtime();
        if (rank > 1) continue;
        int peer = 1 - rank, n = 0;
        if (both || rank == 1)
            for (int w = 0; w < window; w++)
                MPI_Irecv(rbuf + (size_t)w * len, (int)len, MPI_CHAR, peer, 100, MPI_COMM_WORLD,
                          &reqs[n++]);
        if (both || rank == 0)
            for (int w = 0; w < window; w++)
                MPI_Isend(sbuf, (int)len, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[n++]);
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        if (!both) {
            char ack[4] = {0};
            if (rank == 0)
                MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
        }
    }
    double secs = MPI_Wtime() - start;
    free(reqs);
    return (both ? 2.0 : 1.0) * (double)len * window * iters / secs / 1e6;
}

static double collective(int bcast, char *buf, double *in, double *out, long len, int iters,
                         int warmup) {
    double total = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + warmup; i++) {
        double t = MPI_Wtime();
        if (bcast) {
            MPI_Bcast(buf, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
        } else {
            for (long k = 0; k < len / 8; k++) in[k] = 1.0;
            MPI_Allreduce(in, out, (int)(len / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        if (i >= warmup) total += MPI_Wtime() - t;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    double mine = total * 1e6 / iters, sum = 0;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum / size;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 7) {
        if (rank == 0)
            fprintf(stderr, "usage: osu-ompi BENCH MIN MAX ITERS WARMUP WINDOW\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *b = argv[1];
    long min = atol(argv[2]), max = atol(argv[3]);
    int iters = atoi(argv[4]), warmup = atoi(argv[5]), window = atoi(argv[6]);
    if (window < 1) window = 1;
    if (iters < 1) iters = 1;
    const char *title, *column;
    int kind; /* 0 latency, 1 bw, 2 bibw, 3 bcast, 4 allreduce, 5 latency-p50 */
    long least;
    if (!strcmp(b, "latency")) {
        kind = 0, least = 0, title = "OSU MPI Latency Test", column = "Latency (us)";
    } else if (!strcmp(b, "latency-p50")) {
        kind = 5, least = 0, title = "OSU MPI Latency Test, p50", column = "p50 Latency (us)";
    } else if (!strcmp(b, "bw")) {
        kind = 1, least = 1, title = "OSU MPI Bandwidth Test", column = "Bandwidth (MB/s)";
    } else if (!strcmp(b, "bibw")) {
        kind = 2, least = 1, title = "OSU MPI Bi-Directional Bandwidth Test",
        column = "Bandwidth (MB/s)";
    } else if (!strcmp(b, "bcast")) {
        kind = 3, least = 1, title = "OSU MPI Broadcast Latency Test", column = "Avg Latency(us)";
    } else if (!strcmp(b, "allreduce")) {
        kind = 4, least = 8, title = "OSU MPI Allreduce Latency Test", column = "Avg Latency(us)";
    } else {
        if (rank == 0) fprintf(stderr, "osu-ompi: unknown benchmark %s\n", b);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    if ((kind <= 2 || kind == 5) && size < 2) {
        if (rank == 0) fprintf(stderr, "osu-ompi: %s needs 2 ranks\n", b);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (min < least) min = least;
    size_t cap = (size_t)(max > 8 ? max : 8);
    char *sbuf = malloc(cap), *rbuf = malloc(cap * (size_t)(kind <= 2 ? window : 1));
    double *in = malloc(cap), *out = malloc(cap);
    if (!sbuf || !rbuf || !in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(sbuf, 'a', cap);
    if (rank == 0) printf("# %s (Open MPI, benches/osu/osu-ompi.c)\n%-10s%18s\n", title, "# Size", column);
    double cpu0[2];
    cpu_now(cpu0);
    for (long len = min; len <= max; len = len ? len * 2 : 1) {
        int it = len > LARGE_MESSAGE_SIZE ? (iters / 10 > 0 ? iters / 10 : 1) : iters;
        int wu = len > LARGE_MESSAGE_SIZE ? warmup / 10 : warmup;
        double v;
        switch (kind) {
        case 0: v = latency(sbuf, len, it, wu, 0); break;
        case 5: v = latency(sbuf, len, it, wu, 1); break;
        case 1: v = bandwidth(sbuf, rbuf, len, it, wu, window, 0); break;
        case 2: v = bandwidth(sbuf, rbuf, len, it, wu, window, 1); break;
        default: v = collective(kind == 3, sbuf, in, out, len, it, wu); break;
        }
        if (rank == 0) {
            printf("%-10ld%18.2f\n", len, v);
            fflush(stdout);
        }
    }
    /* CPU time of each process over the sizes (its threads included: Open
     * MPI's and the transport's), for CPU per byte beside the figures. */
    double cpu1[2];
    cpu_now(cpu1);
    double mine[2] = {cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]};
    double *all = malloc(sizeof(double) * 2 * (size_t)size);
    if (!all) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 0; r < size; r++)
            printf("# cpu rank %d: user %.3f sys %.3f\n", r, all[2 * r], all[2 * r + 1]);
    free(all);
    MPI_Barrier(MPI_COMM_WORLD);
    free(sbuf), free(rbuf), free(in), free(out);
    MPI_Finalize();
    return 0;
}
