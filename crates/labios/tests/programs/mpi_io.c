/* Two I/O patterns of the article's workloads, with plain POSIX calls:
 * CM1 writes one shared file, each rank at its own offset; HACC writes one
 * file per rank. Every rank then reads back another rank's data and checks
 * it; rank 0 prints a digest of both files, read whole. Then the CM1
 * pattern again through MPI-IO (ROMIO): collective writes and reads of one
 * shared file, its size, and an independent read. */
#include <mpi.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (256 * 1024 + 13)
#define STEPS 2

static void fill(unsigned char *buf, int rank, int step) {
    uint32_t x = 2166136261u ^ (uint32_t)(rank * 131 + step * 7919);
    for (size_t i = 0; i < BLOCK; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        buf[i] = (unsigned char)x;
    }
}

static uint64_t digest(const unsigned char *b, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

static void die(const char *what, const char *path) {
    perror(what);
    fprintf(stderr, "  path: %s\n", path);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) { fprintf(stderr, "usage: mpi_io DIR\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    char shared[4096], mine[4096], other[4096];
    snprintf(shared, sizeof shared, "%s/cm1.out", argv[1]);
    snprintf(mine, sizeof mine, "%s/hacc.%d", argv[1], rank);
    snprintf(other, sizeof other, "%s/hacc.%d", argv[1], (rank + 1) % size);
    unsigned char *buf = malloc(BLOCK), *got = malloc(BLOCK);

    int fd = open(shared, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) die("open shared", shared);
    int own = open(mine, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (own < 0) die("open own", mine);
    for (int step = 0; step < STEPS; step++) {
        fill(buf, rank, step);
        off_t at = ((off_t)step * size + rank) * BLOCK;
        if (pwrite(fd, buf, BLOCK, at) != BLOCK) die("pwrite shared", shared);
        if (write(own, buf, BLOCK) != BLOCK) die("write own", mine);
    }
    if (fsync(fd) || close(fd) || close(own)) die("close", shared);
    MPI_Barrier(MPI_COMM_WORLD);

    int peer = (rank + 1) % size, bad = 0;
    fd = open(shared, O_RDONLY);
    own = open(other, O_RDONLY);
    if (fd < 0 || own < 0) die("open for read", shared);
    for (int step = 0; step < STEPS; step++) {
        fill(buf, peer, step);
        off_t at = ((off_t)step * size + peer) * BLOCK;
        if (pread(fd, got, BLOCK, at) != BLOCK || memcmp(buf, got, BLOCK)) bad++;
        if (read(own, got, BLOCK) != BLOCK || memcmp(buf, got, BLOCK)) bad++;
    }
    close(fd);
    close(own);

    char mpiio[4096];
    snprintf(mpiio, sizeof mpiio, "%s/cm1.mpiio", argv[1]);
    MPI_File fh;
    MPI_Status st;
    if (MPI_File_open(MPI_COMM_WORLD, mpiio, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                      MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        die("MPI_File_open for writing", mpiio);
    for (int step = 0; step < STEPS; step++) {
        fill(buf, rank, step + 10);
        MPI_Offset at = ((MPI_Offset)step * size + rank) * BLOCK;
        if (MPI_File_write_at_all(fh, at, buf, BLOCK, MPI_BYTE, &st) != MPI_SUCCESS)
            die("MPI_File_write_at_all", mpiio);
    }
    if (MPI_File_close(&fh) != MPI_SUCCESS) die("MPI_File_close", mpiio);
    if (MPI_File_open(MPI_COMM_WORLD, mpiio, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        die("MPI_File_open for reading", mpiio);
    MPI_Offset fsize = 0;
    if (MPI_File_get_size(fh, &fsize) != MPI_SUCCESS) die("MPI_File_get_size", mpiio);
    if (fsize != (MPI_Offset)STEPS * size * BLOCK) bad++;
    for (int step = 0; step < STEPS; step++) {
        fill(buf, peer, step + 10);
        MPI_Offset at = ((MPI_Offset)step * size + peer) * BLOCK;
        if (MPI_File_read_at_all(fh, at, got, BLOCK, MPI_BYTE, &st) != MPI_SUCCESS) die("MPI_File_read_at_all", mpiio);
        if (memcmp(buf, got, BLOCK)) bad++;
    }
    fill(buf, rank, 10);
    if (MPI_File_read_at(fh, (MPI_Offset)rank * BLOCK, got, BLOCK, MPI_BYTE, &st) != MPI_SUCCESS)
        die("MPI_File_read_at", mpiio);
    if (memcmp(buf, got, BLOCK)) bad++;
    if (MPI_File_close(&fh) != MPI_SUCCESS) die("MPI_File_close", mpiio);

    int total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t h = 14695981039346656037ull;
        FILE *f = fopen(shared, "rb");
        if (!f) die("fopen", shared);
        size_t n, bytes = 0;
        while ((n = fread(got, 1, BLOCK, f)) > 0) { h = digest(got, n, h); bytes += n; }
        fclose(f);
        printf("ranks %d, shared file %zu bytes, digest %016llx, mismatches %d\n",
               size, bytes, (unsigned long long)h, total);
    }
    free(buf);
    free(got);
    MPI_Finalize();
    return total != 0;
}
