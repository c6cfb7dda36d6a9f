/* Cost of calls that are not LABIOS's, with and without liblabios_preload.so
 * in LD_PRELOAD: each line is "CALL NS_PER_CALL". Run by
 * scripts/bench-preload.sh, which compares the two. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

#define TIME(name, n, body)                                                   \
    do {                                                                      \
        double t0 = now();                                                    \
        for (long i = 0; i < (n); i++) { body; }                              \
        printf("%s %.1f\n", name, (now() - t0) / (n));                        \
    } while (0)

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/overhead.dat", dir);
    static char buf[4096];
    memset(buf, 7, sizeof buf);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) { perror(path); return 1; }
    struct stat st;
    long n = 200000;
    TIME("pwrite_4k", n, if (pwrite(fd, buf, sizeof buf, (i % 256) * 4096) != sizeof buf) abort());
    TIME("pread_4k", n, if (pread(fd, buf, sizeof buf, (i % 256) * 4096) != sizeof buf) abort());
    TIME("write_read_1b", n, { lseek(fd, 0, SEEK_SET); if (write(fd, buf, 1) != 1 || read(fd, buf, 1) != 1) abort(); });
    TIME("fstat", n, fstat(fd, &st));
    TIME("stat", n, stat(path, &st));
    TIME("open_close", n / 4, { int f = open(path, O_RDONLY); if (f < 0) abort(); close(f); });
    TIME("fopen_fgets_fclose", n / 4, { FILE *f = fopen(path, "r"); if (!f) abort(); fgets(buf, 64, f); fclose(f); });
    TIME("opendir_readdir", n / 20, { DIR *d = opendir(dir); if (!d) abort(); while (readdir(d)) {} closedir(d); });
    close(fd);
    unlink(path);
    return 0;
}
