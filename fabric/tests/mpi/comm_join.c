/*
 * MPI_Comm_join: two processes that meet at run time through a TCP socket
 * (MPI 4.1 sec. 11.8.6), then talk over the intercommunicator it gives.
 * Rank 0 of a 2-rank job listens on 127.0.0.1, tells rank 1 the port over
 * MPI_COMM_WORLD; rank 1 connects; both call MPI_Comm_join on their end of
 * the socket. Over the join: a standard and a synchronous send each way
 * (64 KiB, byte-checked), then MPI_Comm_disconnect.
 *
 *   mpicc -O2 -o comm_join comm_join.c && mpirun -np 2 ./comm_join
 *
 * Prints "comm_join: ok" (rank 0) and exits 0, or names the failed step
 * and exits non-zero. scripts/mpi-dynproc.sh runs it under Open MPI's ob1
 * and over the provider.
 */
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LEN 65536

static void die(const char *what)
{
    fprintf(stderr, "comm_join: FAIL %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    int rank, size, port = 0, fd = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2)
        die("run it with 2 ranks");

    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (rank == 0) {
        int ls = socket(AF_INET, SOCK_STREAM, 0);
        socklen_t n = sizeof a;
        if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
            getsockname(ls, (struct sockaddr *)&a, &n))
            die("listen on 127.0.0.1");
        port = ntohs(a.sin_port);
        MPI_Send(&port, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
        fd = accept(ls, NULL, NULL);
        close(ls);
    } else {
        MPI_Recv(&port, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        a.sin_port = htons((unsigned short)port);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0)
        die("the socket between the two processes");

    MPI_Comm inter;
    if (MPI_Comm_join(fd, &inter) != MPI_SUCCESS || inter == MPI_COMM_NULL)
        die("MPI_Comm_join");
    close(fd);
    int flag = 0, remote = 0;
    MPI_Comm_test_inter(inter, &flag);
    MPI_Comm_remote_size(inter, &remote);
    if (!flag || remote != 1)
        die("the join is not an intercommunicator of one remote process");

    unsigned char *out = malloc(LEN), *in = malloc(LEN);
    for (int i = 0; i < LEN; i++)
        out[i] = (unsigned char)(i * 7 + rank);
    for (int round = 0; round < 2; round++) {
        /* rank 0 sends first, rank 1 receives first: no deadlock with Ssend */
        for (int turn = 0; turn < 2; turn++) {
            if (turn == rank) {
                if (round == 0)
                    MPI_Send(out, LEN, MPI_BYTE, 0, 10 + round, inter);
                else
                    MPI_Ssend(out, LEN, MPI_BYTE, 0, 10 + round, inter);
            } else {
                memset(in, 0, LEN);
                MPI_Recv(in, LEN, MPI_BYTE, 0, 10 + round, inter, MPI_STATUS_IGNORE);
                for (int i = 0; i < LEN; i++)
                    if (in[i] != (unsigned char)(i * 7 + (1 - rank)))
                        die("data over the join");
            }
        }
    }
    MPI_Comm_disconnect(&inter);
    free(out);
    free(in);
    if (rank == 0)
        printf("comm_join: ok\n");
    MPI_Finalize();
    return 0;
}
