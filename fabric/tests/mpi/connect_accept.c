/*
 * MPI_Comm_connect / MPI_Comm_accept (MPI 4.1 sec. 11.8): the ranks of one
 * job split into a server group (even ranks) and a client group (odd
 * ranks); the server group's root opens a port (MPI_Open_port) and gives
 * its name to everyone over MPI_COMM_WORLD; the server group accepts, the
 * client group connects. Over the intercommunicator: each client rank
 * sends its rank to server rank (its rank % servers), an
 * MPI_Intercomm_merge, and an MPI_Allreduce over the merged communicator;
 * then MPI_Comm_disconnect and MPI_Close_port.
 *
 *   mpicc -O2 -o connect_accept connect_accept.c && mpirun -np 2 ./connect_accept
 *
 * Prints "connect_accept: ok" (world rank 0) and exits 0, or names the
 * failed step and exits non-zero. scripts/mpi-dynproc.sh runs it.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "connect_accept: FAIL %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2)
        die("run it with 2 or more ranks");

    int server = rank % 2 == 0;
    MPI_Comm local;
    MPI_Comm_split(MPI_COMM_WORLD, server, rank, &local);
    char port[MPI_MAX_PORT_NAME];
    memset(port, 0, sizeof port);
    if (rank == 0 && MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS)
        die("MPI_Open_port");
    MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);

    MPI_Comm inter;
    int rc = server ? MPI_Comm_accept(port, MPI_INFO_NULL, 0, local, &inter)
                    : MPI_Comm_connect(port, MPI_INFO_NULL, 0, local, &inter);
    if (rc != MPI_SUCCESS || inter == MPI_COMM_NULL)
        die(server ? "MPI_Comm_accept" : "MPI_Comm_connect");

    int lsize, rsize, lrank;
    MPI_Comm_size(local, &lsize);
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_remote_size(inter, &rsize);
    if (lsize + rsize != size)
        die("group sizes");
    /* every client rank sends to server rank lrank % rsize */
    if (!server) {
        MPI_Send(&rank, 1, MPI_INT, lrank % rsize, 7, inter);
    } else {
        for (int c = 0; c < rsize; c++) {
            if (c % lsize != lrank)
                continue;
            int got = -1;
            MPI_Recv(&got, 1, MPI_INT, c, 7, inter, MPI_STATUS_IGNORE);
            if (got != 2 * c + 1)
                die("message over the intercommunicator");
        }
    }
    MPI_Comm merged;
    MPI_Intercomm_merge(inter, !server, &merged);
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, merged);
    if (sum != size)
        die("MPI_Allreduce over the merged communicator");
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    if (rank == 0)
        MPI_Close_port(port);
    MPI_Comm_free(&local);
    if (rank == 0)
        printf("connect_accept: ok (%d servers, %d clients)\n", (size + 1) / 2, size / 2);
    MPI_Finalize();
    return 0;
}
