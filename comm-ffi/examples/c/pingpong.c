/* comm's C ABI in use: N ranks over CTP on UDP.
 *
 *   pingpong RANK ADDR0 ADDR1 ... (each "IP:PORT"; start one process per rank)
 *
 * Rank 0 ping-pongs 1000 messages of 1..4096 bytes with every other rank,
 * checking every byte; then all ranks run bcast, allreduce (int64 and
 * double), a truncated receive and a barrier. Prints "rank R: ok" and
 * exits 0, or prints what failed and exits 1. Built and run by
 * comm-ffi/tests/c_example.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

#define CHECK(call)                                                            \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != COMM_OK) {                                                  \
            fprintf(stderr, "rank %d: %s failed: %d %s\n", rank, #call, rc_,   \
                    comm_last_error());                                        \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static unsigned char byte_at(int i, int round, int peer) {
    return (unsigned char)(i * 31 + round * 7 + peer);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s RANK ADDR0 ADDR1 ...\n", argv[0]);
        return 2;
    }
    int rank = atoi(argv[1]);
    int size = argc - 2;
    CommHandle *c = comm_init_udp(rank, size, (const char *const *)&argv[2]);
    if (!c) {
        fprintf(stderr, "rank %d: comm_init_udp: %s\n", rank, comm_last_error());
        return 1;
    }
    if (comm_rank(c) != rank || comm_size(c) != size) {
        fprintf(stderr, "rank %d: comm_rank/comm_size disagree\n", rank);
        return 1;
    }
    if (comm_rank(NULL) != COMM_ERR_ARG || strlen(comm_last_error()) == 0) {
        fprintf(stderr, "rank %d: a NULL handle was not refused\n", rank);
        return 1;
    }

    static unsigned char buf[4096], back[4096];
    CommStatus st;
    for (int peer = 1; peer < size; peer++) {
        for (int round = 0; round < 1000; round++) {
            size_t len = 1 + (size_t)(round * 97) % sizeof buf;
            if (rank == 0) {
                for (size_t i = 0; i < len; i++) buf[i] = byte_at((int)i, round, peer);
                CHECK(comm_send(c, peer, 1, buf, len));
                CHECK(comm_recv(c, peer, 1, back, sizeof back, &st));
                if (st.len != len || st.source != peer || st.tag != 1 ||
                    memcmp(buf, back, len) != 0) {
                    fprintf(stderr, "rank 0: echo %d from rank %d differs\n", round, peer);
                    return 1;
                }
            } else if (rank == peer) {
                CHECK(comm_recv(c, COMM_ANY_SOURCE, COMM_ANY_TAG, back, sizeof back, &st));
                CHECK(comm_send(c, 0, 1, back, st.len));
            }
        }
    }

    /* Multicast bcast needs EDP: over UDP the call is refused, with a message. */
    if (comm_enable_multicast_bcast(c, 7, 4000) != COMM_ERR_ARG || strstr(comm_last_error(), "EDP") == NULL) {
        fprintf(stderr, "rank %d: comm_enable_multicast_bcast over UDP was not refused\n", rank);
        return 1;
    }

    unsigned char block[1000];
    if (rank == 0) for (int i = 0; i < 1000; i++) block[i] = (unsigned char)(i ^ 0x5a);
    else memset(block, 0, sizeof block);
    CHECK(comm_bcast(c, 0, block, sizeof block));
    for (int i = 0; i < 1000; i++) {
        if (block[i] != (unsigned char)(i ^ 0x5a)) {
            fprintf(stderr, "rank %d: bcast byte %d differs\n", rank, i);
            return 1;
        }
    }

    int64_t ints[2] = {rank, 1};
    CHECK(comm_allreduce_sum_i64(c, ints, 2));
    double d = 0.5 * rank;
    CHECK(comm_allreduce_sum_f64(c, &d, 1));
    if (ints[0] != (int64_t)size * (size - 1) / 2 || ints[1] != size ||
        d != 0.25 * size * (size - 1)) {
        fprintf(stderr, "rank %d: allreduce gave %lld %lld %g\n", rank,
                (long long)ints[0], (long long)ints[1], d);
        return 1;
    }

    /* A message longer than the buffer: an error that says so, its head kept. */
    if (size > 1 && rank == 1) {
        memset(buf, 7, 100);
        CHECK(comm_send(c, 0, 9, buf, 100));
    }
    if (size > 1 && rank == 0) {
        unsigned char small[10];
        int rc = comm_recv(c, 1, 9, small, sizeof small, &st);
        if (rc != COMM_ERR_TRUNCATED || st.len != 100 || small[9] != 7) {
            fprintf(stderr, "rank 0: truncated receive gave %d (len %zu): %s\n", rc,
                    st.len, comm_last_error());
            return 1;
        }
    }

    /* ULFC: every peer granted us a window; a write after disconnect
     * fails with its own code until reconnect. */
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        if (comm_dest_buf(c, p) <= 0 || comm_state(c, p) < COMM_STATE_UNCONNECTED) {
            fprintf(stderr, "rank %d: no window from rank %d\n", rank, p);
            return 1;
        }
    }
    if (size > 1) {
        int p = (rank + 1) % size;
        CHECK(comm_disconnect(c, p));
        if (comm_state(c, p) != COMM_STATE_EXPLICIT_DISCONNECT ||
            comm_send(c, p, 3, buf, 1) != COMM_ERR_DISCONNECTED) {
            fprintf(stderr, "rank %d: disconnect did not stop writes\n", rank);
            return 1;
        }
        CHECK(comm_reconnect(c, p));
    }

    CHECK(comm_barrier(c));
    CHECK(comm_finalize(c, 5000));
    printf("rank %d: ok\n", rank);
    return 0;
}
