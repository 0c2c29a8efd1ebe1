/*
 * mpi_check: what an MPI program needs from the network under it, checked
 * rank by rank. Run it under mpirun with any even number of ranks:
 *
 *   mpi_check [--max BYTES] [--skip NAME,...]
 *                             the checks below (largest message BYTES,
 *                             default 64 MiB), but those whose names
 *                             (hello_ring, wildcards, order, probes, ssend,
 *                             waitall, sizes, truncation, cancel,
 *                             collectives) are listed after --skip
 *   mpi_check --kill          the killed-rank check: after a barrier the
 *                             last rank kills itself with SIGKILL while
 *                             rank 0 waits for its message; the job must
 *                             end with Open MPI's error (the harness times
 *                             it), not hang
 *
 * Every check prints "ok <name>" on rank 0; a failure prints
 * "FAIL <name>: <what>" on the rank that saw it and aborts the job with
 * exit code 1. "mpi_check: all checks passed (N ranks)" ends a good run.
 *
 * Checks: hello and ring; tags and wildcards (MPI_ANY_SOURCE, MPI_ANY_TAG,
 * a tag received out of order); non-overtaking order; MPI_Probe /
 * MPI_Iprobe / MPI_Mprobe / MPI_Improbe + MPI_Mrecv; MPI_Ssend and
 * MPI_Issend (complete only once the receive matched); 256 outstanding
 * MPI_Isend / MPI_Irecv with MPI_Waitall; sizes 0 B .. --max byte-exact;
 * truncation (MPI_ERR_TRUNCATE, for a message that arrived first and for
 * a receive posted first); MPI_Cancel of a receive; collectives (Barrier,
 * Bcast small and large, Reduce, Allreduce, Gather, Allgather, Alltoall,
 * Scatter, Reduce_scatter_block, Scan).
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

#define FAIL(name, ...)                                                 \
    do {                                                                \
        fprintf(stderr, "FAIL %s (rank %d): ", name, rank);             \
        fprintf(stderr, __VA_ARGS__);                                   \
        fprintf(stderr, "\n");                                          \
        fflush(stderr);                                                 \
        MPI_Abort(MPI_COMM_WORLD, 1);                                   \
    } while (0)

#define CHECK(name, cond, ...)                                          \
    do {                                                                \
        if (!(cond))                                                    \
            FAIL(name, __VA_ARGS__);                                    \
    } while (0)

#define MPI_OK(name, call)                                              \
    do {                                                                \
        int rc_ = (call);                                               \
        if (rc_ != MPI_SUCCESS)                                         \
            FAIL(name, "%s returned %d", #call, rc_);                   \
    } while (0)

static void ok(const char *name)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ok %s\n", name);
        fflush(stdout);
    }
}

/* The byte at offset i of a message of `len` bytes from `from` with `tag`. */
static unsigned char pattern(size_t i, size_t len, int from, int tag)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ (uint64_t)len * 31 ^
                 (uint64_t)from << 40 ^ (uint64_t)tag << 20;
    x ^= x >> 29;
    return (unsigned char)(x ^ x >> 8);
}

static void fill(unsigned char *b, size_t len, int from, int tag)
{
    for (size_t i = 0; i < len; i++)
        b[i] = pattern(i, len, from, tag);
}

/* Offset of the first wrong byte, or -1. */
static long verify(const unsigned char *b, size_t len, int from, int tag)
{
    for (size_t i = 0; i < len; i++)
        if (b[i] != pattern(i, len, from, tag))
            return (long)i;
    return -1;
}

static int peer(void) { return rank ^ 1; }

static void check_hello_ring(void)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    printf("hello from rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);
    int token = 0;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    if (rank == 0) {
        token = 1;
        MPI_OK("ring", MPI_Send(&token, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
        MPI_OK("ring", MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK("ring", token == size, "token %d after one round of %d ranks", token, size);
    } else {
        MPI_OK("ring", MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        token++;
        MPI_OK("ring", MPI_Send(&token, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
    }
    ok("hello_ring");
}

static void check_wildcards(void)
{
    /* Every other rank sends rank 0 three messages with tags 10+r, 20+r,
     * 30+r; rank 0 takes the 30s first by tag, then the rest with
     * MPI_ANY_SOURCE / MPI_ANY_TAG. */
    if (rank != 0) {
        for (int k = 1; k <= 3; k++) {
            int v = rank * 100 + k;
            MPI_OK("wildcards", MPI_Send(&v, 1, MPI_INT, 0, 10 * k + rank, MPI_COMM_WORLD));
        }
    } else {
        for (int r = 1; r < size; r++) {
            int v;
            MPI_Status st;
            MPI_OK("wildcards", MPI_Recv(&v, 1, MPI_INT, r, 30 + r, MPI_COMM_WORLD, &st));
            CHECK("wildcards", v == r * 100 + 3 && st.MPI_SOURCE == r && st.MPI_TAG == 30 + r,
                  "tag %d from %d: value %d", st.MPI_TAG, st.MPI_SOURCE, v);
        }
        int seen[2][64] = {{0}};
        for (int i = 0; i < 2 * (size - 1); i++) {
            int v, n;
            MPI_Status st;
            MPI_OK("wildcards", MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_INT, &n);
            int k = st.MPI_TAG / 10, r = st.MPI_SOURCE;
            CHECK("wildcards", n == 1 && (k == 1 || k == 2) && st.MPI_TAG == 10 * k + r && v == r * 100 + k,
                  "got value %d tag %d source %d count %d", v, st.MPI_TAG, r, n);
            /* Non-overtaking: tag 1x of a sender comes before its 2x. */
            CHECK("wildcards", k == 1 ? !seen[1][r] : seen[0][r], "rank %d's tag %d overtook", r, st.MPI_TAG);
            CHECK("wildcards", !seen[k - 1][r], "duplicate tag %d from %d", st.MPI_TAG, r);
            seen[k - 1][r] = 1;
        }
    }
    ok("tags_wildcards");
}

static void check_order(void)
{
    enum { N = 200 };
    if (rank % 2 == 0) {
        for (int i = 0; i < N; i++) {
            int v = i;
            MPI_OK("order", MPI_Send(&v, 1, MPI_INT, peer(), i % 3, MPI_COMM_WORLD));
        }
    } else {
        for (int i = 0; i < N; i++) {
            int v;
            MPI_OK("order", MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK("order", v == i, "message %d arrived as number %d", v, i);
        }
    }
    ok("non_overtaking_order");
}

static void check_probes(void)
{
    const int n = 1000;
    unsigned char *b = malloc(n);
    if (rank % 2 == 0) {
        for (int t = 0; t < 4; t++) {
            fill(b, (size_t)n - t, rank, 40 + t);
            MPI_OK("probe", MPI_Send(b, n - t, MPI_BYTE, peer(), 40 + t, MPI_COMM_WORLD));
        }
    } else {
        MPI_Status st;
        int count, flag = 0;
        /* MPI_Probe: length, source, tag before the receive. */
        MPI_OK("probe", MPI_Probe(MPI_ANY_SOURCE, 40, MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK("probe", count == n && st.MPI_SOURCE == peer() && st.MPI_TAG == 40,
              "probe saw %d bytes from %d tag %d", count, st.MPI_SOURCE, st.MPI_TAG);
        MPI_OK("probe", MPI_Recv(b, n, MPI_BYTE, st.MPI_SOURCE, 40, MPI_COMM_WORLD, &st));
        CHECK("probe", verify(b, n, peer(), 40) < 0, "probed message corrupt");
        /* MPI_Iprobe until the message is there. */
        while (!flag)
            MPI_OK("iprobe", MPI_Iprobe(peer(), 41, MPI_COMM_WORLD, &flag, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK("iprobe", count == n - 1, "iprobe saw %d bytes", count);
        MPI_OK("iprobe", MPI_Recv(b, n, MPI_BYTE, peer(), 41, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK("iprobe", verify(b, n - 1, peer(), 41) < 0, "iprobed message corrupt");
        /* MPI_Mprobe + MPI_Mrecv: the matched message is taken out. */
        MPI_Message m;
        MPI_OK("mprobe", MPI_Mprobe(MPI_ANY_SOURCE, 42, MPI_COMM_WORLD, &m, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK("mprobe", count == n - 2, "mprobe saw %d bytes", count);
        /* A probe for the same tag now must not see it again. */
        MPI_OK("mprobe", MPI_Iprobe(peer(), 42, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        CHECK("mprobe", !flag, "a matched message was probed again");
        MPI_OK("mprobe", MPI_Mrecv(b, count, MPI_BYTE, &m, &st));
        CHECK("mprobe", verify(b, n - 2, peer(), 42) < 0, "mprobed message corrupt");
        /* MPI_Improbe. */
        flag = 0;
        while (!flag)
            MPI_OK("improbe", MPI_Improbe(peer(), 43, MPI_COMM_WORLD, &flag, &m, &st));
        MPI_OK("improbe", MPI_Mrecv(b, n, MPI_BYTE, &m, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK("improbe", count == n - 3 && verify(b, n - 3, peer(), 43) < 0, "improbed message: %d bytes", count);
    }
    free(b);
    ok("probe_iprobe_mprobe");
}

static void check_ssend(void)
{
    /* The receiver posts its receive 200 ms after the barrier: a
     * synchronous send must not complete before. */
    const double delay = 0.2;
    int v = 5;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank % 2 == 0) {
        double t0 = MPI_Wtime();
        MPI_OK("ssend", MPI_Ssend(&v, 1, MPI_INT, peer(), 50, MPI_COMM_WORLD));
        double dt = MPI_Wtime() - t0;
        CHECK("ssend", dt >= delay * 0.8, "MPI_Ssend returned after %.3f s, before the receive was posted", dt);
        MPI_Request rq;
        int done = 0;
        MPI_OK("issend", MPI_Issend(&v, 1, MPI_INT, peer(), 51, MPI_COMM_WORLD, &rq));
        MPI_OK("issend", MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
        CHECK("issend", !done, "MPI_Issend completed before its receive was posted");
        MPI_OK("issend", MPI_Wait(&rq, MPI_STATUS_IGNORE));
    } else {
        usleep((useconds_t)(delay * 1e6));
        MPI_OK("ssend", MPI_Recv(&v, 1, MPI_INT, peer(), 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        usleep((useconds_t)(delay * 1e6));
        MPI_OK("issend", MPI_Recv(&v, 1, MPI_INT, peer(), 51, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    ok("ssend_issend");
}

static void check_outstanding(void)
{
    enum { N = 256 };
    MPI_Request rq[2 * N];
    unsigned char *tx[N], *rx[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = (size_t)(i * 97) % 9000; /* 0 .. ~9 KB, some multi-frame */
        tx[i] = malloc(len[i] + 1);
        rx[i] = malloc(len[i] + 1);
        fill(tx[i], len[i], rank, 1000 + i);
    }
    /* Receives first for half the tags, sends first for the rest. */
    for (int i = 0; i < N; i++) {
        if (i % 2 == 0) {
            MPI_OK("waitall", MPI_Irecv(rx[i], (int)len[i], MPI_BYTE, peer(), 1000 + i, MPI_COMM_WORLD, &rq[i]));
            MPI_OK("waitall", MPI_Isend(tx[i], (int)len[i], MPI_BYTE, peer(), 1000 + i, MPI_COMM_WORLD, &rq[N + i]));
        } else {
            MPI_OK("waitall", MPI_Isend(tx[i], (int)len[i], MPI_BYTE, peer(), 1000 + i, MPI_COMM_WORLD, &rq[N + i]));
            MPI_OK("waitall", MPI_Irecv(rx[i], (int)len[i], MPI_BYTE, peer(), 1000 + i, MPI_COMM_WORLD, &rq[i]));
        }
    }
    MPI_OK("waitall", MPI_Waitall(2 * N, rq, MPI_STATUSES_IGNORE));
    for (int i = 0; i < N; i++) {
        long bad = verify(rx[i], len[i], peer(), 1000 + i);
        CHECK("waitall", bad < 0, "message %d (%zu bytes) wrong at byte %ld", i, len[i], bad);
        free(tx[i]);
        free(rx[i]);
    }
    ok("isend_irecv_waitall_256");
}

static void check_sizes(size_t max)
{
    unsigned char *tx = malloc(max + 1), *rx = malloc(max + 1);
    if (!tx || !rx)
        FAIL("sizes", "cannot allocate 2 x %zu bytes", max);
    size_t sizes[128];
    int n = 0;
    sizes[n++] = 0;
    for (size_t s = 1; s <= max && n < 120; s *= 2) {
        sizes[n++] = s;
        if (s > 2 && s + 3 <= max)
            sizes[n++] = s + 3; /* odd sizes across fragment edges */
    }
    if (sizes[n - 1] != max)
        sizes[n++] = max;
    for (int i = 0; i < n; i++) {
        size_t s = sizes[i];
        int tag = 2000 + i;
        MPI_Request r[2];
        fill(tx, s, rank, tag);
        memset(rx, 0xee, s);
        MPI_OK("sizes", MPI_Irecv(rx, (int)s, MPI_BYTE, peer(), tag, MPI_COMM_WORLD, &r[0]));
        MPI_OK("sizes", MPI_Isend(tx, (int)s, MPI_BYTE, peer(), tag, MPI_COMM_WORLD, &r[1]));
        MPI_Status st[2];
        MPI_OK("sizes", MPI_Waitall(2, r, st));
        int count;
        MPI_Get_count(&st[0], MPI_BYTE, &count);
        CHECK("sizes", (size_t)count == s, "%zu-byte message arrived as %d bytes", s, count);
        long bad = verify(rx, s, peer(), tag);
        CHECK("sizes", bad < 0, "%zu-byte message wrong at byte %ld", s, bad);
    }
    free(tx);
    free(rx);
    char name[64];
    snprintf(name, sizeof name, "sizes_0_to_%zu_byte_exact", max);
    ok(name);
}

static void check_truncation(void)
{
    unsigned char b[100], small[10];
    fill(b, sizeof b, rank, 60);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank % 2 == 0) {
        /* Unexpected: the message is there before the receive. */
        MPI_OK("truncation", MPI_Send(b, 100, MPI_BYTE, peer(), 60, MPI_COMM_WORLD));
        MPI_Barrier(MPI_COMM_WORLD);
        /* Expected: the receive is posted before the message. */
        MPI_Barrier(MPI_COMM_WORLD);
        usleep(100000);
        MPI_OK("truncation", MPI_Send(b, 100, MPI_BYTE, peer(), 61, MPI_COMM_WORLD));
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        usleep(100000);
        MPI_Status st;
        int rc = MPI_Recv(small, 10, MPI_BYTE, peer(), 60, MPI_COMM_WORLD, &st);
        int cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK("truncation", cls == MPI_ERR_TRUNCATE, "short receive of an arrived 100-byte message: error class %d, want MPI_ERR_TRUNCATE (%d)", cls, MPI_ERR_TRUNCATE);
        MPI_Request rq;
        MPI_OK("truncation", MPI_Irecv(small, 10, MPI_BYTE, peer(), 61, MPI_COMM_WORLD, &rq));
        MPI_Barrier(MPI_COMM_WORLD);
        rc = MPI_Wait(&rq, &st);
        MPI_Error_class(rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc, &cls);
        if (rc == MPI_SUCCESS)
            MPI_Error_class(st.MPI_ERROR, &cls);
        CHECK("truncation", cls == MPI_ERR_TRUNCATE, "short receive posted first: error class %d, want MPI_ERR_TRUNCATE (%d)", cls, MPI_ERR_TRUNCATE);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    ok("truncation_err_truncate");
}

static void check_cancel(void)
{
    int v, flag = 0;
    MPI_Request rq;
    MPI_Status st;
    MPI_OK("cancel", MPI_Irecv(&v, 1, MPI_INT, peer(), 77, MPI_COMM_WORLD, &rq));
    MPI_OK("cancel", MPI_Cancel(&rq));
    MPI_OK("cancel", MPI_Wait(&rq, &st));
    MPI_OK("cancel", MPI_Test_cancelled(&st, &flag));
    CHECK("cancel", flag, "a receive nobody sends to was not canceled");
    /* The tag still works afterwards (once both ranks canceled). */
    MPI_Barrier(MPI_COMM_WORLD);
    v = rank;
    int w = -1;
    MPI_OK("cancel", MPI_Sendrecv(&v, 1, MPI_INT, peer(), 77, &w, 1, MPI_INT, peer(), 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK("cancel", w == peer(), "after the cancel, received %d", w);
    ok("cancel");
}

static void check_collectives(void)
{
    int v = rank + 1, sum = 0, *all = malloc(sizeof(int) * size);
    long expect = (long)size * (size + 1) / 2;
    MPI_OK("coll", MPI_Barrier(MPI_COMM_WORLD));
    MPI_OK("coll", MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK("allreduce", sum == expect, "sum %d, want %ld", sum, expect);
    sum = 0;
    MPI_OK("coll", MPI_Reduce(&v, &sum, 1, MPI_INT, MPI_SUM, size - 1, MPI_COMM_WORLD));
    CHECK("reduce", rank != size - 1 || sum == expect, "sum %d at the root, want %ld", sum, expect);
    for (size_t n = 1; n <= (1u << 22); n *= 64) {
        unsigned char *b = malloc(n);
        if (rank == 1 % size)
            fill(b, n, 1, 90);
        MPI_OK("bcast", MPI_Bcast(b, (int)n, MPI_BYTE, 1 % size, MPI_COMM_WORLD));
        CHECK("bcast", verify(b, n, 1, 90) < 0, "%zu-byte broadcast corrupt", n);
        free(b);
    }
    MPI_OK("gather", MPI_Gather(&v, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD));
    for (int i = 0; rank == 0 && i < size; i++)
        CHECK("gather", all[i] == i + 1, "gathered[%d] = %d", i, all[i]);
    MPI_OK("allgather", MPI_Allgather(&v, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < size; i++)
        CHECK("allgather", all[i] == i + 1, "allgathered[%d] = %d", i, all[i]);
    int *out = malloc(sizeof(int) * size), *in = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++)
        out[i] = rank * 1000 + i;
    MPI_OK("alltoall", MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < size; i++)
        CHECK("alltoall", in[i] == i * 1000 + rank, "from %d: %d", i, in[i]);
    int got = -1;
    MPI_OK("scatter", MPI_Scatter(out, 1, MPI_INT, &got, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK("scatter", got == rank, "scattered %d", got);
    for (int i = 0; i < size; i++)
        out[i] = i + rank;
    MPI_OK("reduce_scatter", MPI_Reduce_scatter_block(out, &got, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK("reduce_scatter", got == size * rank + size * (size - 1) / 2, "got %d", got);
    MPI_OK("scan", MPI_Scan(&v, &got, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK("scan", got == (rank + 1) * (rank + 2) / 2, "prefix sum %d", got);
    free(all);
    free(out);
    free(in);
    ok("collectives");
}

static int kill_check(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1) {
        printf("rank %d: killing myself with SIGKILL\n", rank);
        fflush(stdout);
        raise(SIGKILL);
    }
    if (rank == 0) {
        int v;
        /* Never comes: the job must end with an error instead. */
        MPI_Recv(&v, 1, MPI_INT, size - 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        fprintf(stderr, "FAIL kill: a receive from a killed rank completed\n");
        return 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
}

static const char *skip = "";

/* Whether check `name` runs (not listed in --skip). */
static int runs(const char *name)
{
    size_t n = strlen(name);
    for (const char *p = skip; (p = strstr(p, name)) != NULL; p += n)
        if ((p == skip || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) {
            if (rank == 0)
                printf("skipped %s\n", name);
            return 0;
        }
    return 1;
}

int main(int argc, char **argv)
{
    size_t max = 64u << 20;
    int kill = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--skip") && i + 1 < argc)
            skip = argv[++i];
        else if (!strcmp(argv[i], "--kill"))
            kill = 1;
        else
            FAIL("args", "unknown argument %s", argv[i]);
    }
    if (kill) {
        int rc = kill_check();
        MPI_Finalize();
        return rc;
    }
    if (size % 2 != 0 || size > 64)
        FAIL("args", "run an even number of ranks up to 64, not %d", size);
    if (runs("hello_ring"))
        check_hello_ring();
    if (runs("wildcards"))
        check_wildcards();
    if (runs("order"))
        check_order();
    if (runs("probes"))
        check_probes();
    if (runs("ssend"))
        check_ssend();
    if (runs("waitall"))
        check_outstanding();
    if (runs("sizes"))
        check_sizes(max);
    if (runs("truncation"))
        check_truncation();
    if (runs("cancel"))
        check_cancel();
    if (runs("collectives"))
        check_collectives();
    if (rank == 0)
        printf("mpi_check: all checks passed (%d ranks%s%s)\n", size, *skip ? ", skipped " : "", skip);
    MPI_Finalize();
    return 0;
}
