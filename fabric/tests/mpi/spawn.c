/*
 * MPI_Comm_spawn (MPI 4.1 sec. 11.8.2): the job spawns CHILDREN more
 * processes of this program (default 2); each child answers the parents'
 * root with twice the number it was sent, over the intercommunicator
 * (a 1 MiB synchronous send back as well, byte-checked); then both sides
 * merge it (MPI_Intercomm_merge), MPI_Allreduce over all, and disconnect.
 *
 *   mpicc -O2 -o spawn spawn.c && mpirun -np 1 ./spawn [CHILDREN]
 *
 * The parents' rank 0 prints "spawn: ok" and exits 0; a failure names its
 * step and exits non-zero. scripts/mpi-dynproc.sh runs it.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (1 << 20)

static void die(const char *who, const char *what)
{
    fprintf(stderr, "spawn (%s): FAIL %s\n", who, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned char *big = malloc(BIG);

    if (parent == MPI_COMM_NULL) {
        int children = argc > 1 ? atoi(argv[1]) : 2;
        if (children < 1)
            die("parent", "CHILDREN must be 1 or more");
        char *child_argv[] = {"child", NULL};
        int errs[64];
        MPI_Comm inter;
        if (MPI_Comm_spawn(argv[0], child_argv, children, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                           &inter, errs) != MPI_SUCCESS)
            die("parent", "MPI_Comm_spawn");
        for (int i = 0; i < children; i++)
            if (errs[i] != MPI_SUCCESS)
                die("parent", "a child did not start");
        int rsize;
        MPI_Comm_remote_size(inter, &rsize);
        if (rsize != children)
            die("parent", "remote size of the spawn's intercommunicator");
        if (rank == 0) {
            for (int c = 0; c < children; c++) {
                int v = 100 + c, back = -1;
                MPI_Send(&v, 1, MPI_INT, c, 1, inter);
                MPI_Recv(&back, 1, MPI_INT, c, 2, inter, MPI_STATUS_IGNORE);
                if (back != 2 * v)
                    die("parent", "a child's answer");
                memset(big, 0, BIG);
                MPI_Recv(big, BIG, MPI_BYTE, c, 3, inter, MPI_STATUS_IGNORE);
                for (int i = 0; i < BIG; i++)
                    if (big[i] != (unsigned char)(i * 13 + c))
                        die("parent", "a child's 1 MiB message");
            }
        }
        MPI_Comm all;
        MPI_Intercomm_merge(inter, 0, &all);
        int one = 1, sum = 0;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, all);
        if (sum != size + children)
            die("parent", "MPI_Allreduce over parents and children");
        MPI_Comm_free(&all);
        MPI_Comm_disconnect(&inter);
        if (rank == 0)
            printf("spawn: ok (%d parents, %d children)\n", size, children);
    } else {
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE);
        v *= 2;
        MPI_Send(&v, 1, MPI_INT, 0, 2, parent);
        for (int i = 0; i < BIG; i++)
            big[i] = (unsigned char)(i * 13 + rank);
        MPI_Ssend(big, BIG, MPI_BYTE, 0, 3, parent);
        MPI_Comm all;
        MPI_Intercomm_merge(parent, 1, &all);
        int one = 1, sum = 0;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, all);
        MPI_Comm_free(&all);
        MPI_Comm_disconnect(&parent);
    }
    free(big);
    MPI_Finalize();
    return 0;
}
