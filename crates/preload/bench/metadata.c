/* Metadata rates: in DIR, PROCS processes (fork) each create FILES empty
 * files (open O_CREAT|O_WRONLY + close), then stat them, then unlink them.
 * The phases are timed separately with a barrier between them: the parent
 * releases every child into a phase at once and the phase ends when the
 * last child reports it done. Prints total operations per second:
 *
 *   create_per_s N
 *   stat_per_s N
 *   stat_cold_per_s N     (only with COLD_WAIT > 0)
 *   unlink_per_s N
 *
 * The stat phase follows the creates at once, so attribute caches with a
 * lease (the kernel's on a FUSE mount, `labios run`'s) may still hold what
 * the creates put there. With COLD_WAIT > 0, a second stat phase runs
 * COLD_WAIT seconds after the first ends: with a wait longer than those
 * leases, every stat asks the file system (the unlinks then follow it).
 *
 * Run by scripts/bench-mount.sh on a plain directory, under `labios run`
 * (DIR under /labios) and on a `labios mount`.
 *
 *   metadata DIR [PROCS=2] [FILES=2000] [COLD_WAIT=0]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CREATE, STAT, STAT_COLD, UNLINK, PHASES };
static const char *names[PHASES] = {"create", "stat", "stat_cold", "unlink"};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void put(int fd, char c) {
    while (write(fd, &c, 1) != 1) {
        if (errno != EINTR) { perror("metadata: pipe write"); _exit(2); }
    }
}

static char get(int fd) {
    char c;
    ssize_t n;
    while ((n = read(fd, &c, 1)) != 1) {
        if (n == 0) return 'x'; /* every writer gone */
        if (errno != EINTR) { perror("metadata: pipe read"); exit(2); }
    }
    return c;
}

/* The parent's children and, once reaped, how they ended. */
static pid_t *pids;
static int *reaped, *statuses, nprocs;

/* A report from a child; 'x' when a child died without reporting (the
 * others still hold the pipe open, so the read alone would wait forever). */
static char report(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        int r = poll(&p, 1, 1000);
        if (r > 0) return get(fd);
        if (r < 0 && errno != EINTR) { perror("metadata: poll"); exit(2); }
        for (int i = 0; i < nprocs; i++) {
            if (reaped[i] || waitpid(pids[i], &statuses[i], WNOHANG) != pids[i]) continue;
            reaped[i] = 1;
            if (!WIFEXITED(statuses[i]) || WEXITSTATUS(statuses[i]) != 0) return 'x';
        }
    }
}

/* One phase of one child; 0 on success. */
static int phase(int which, const char *dir, int proc, long files) {
    char path[4096];
    struct stat st;
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f.%d.%ld", dir, proc, i);
        switch (which) {
        case CREATE: {
            int fd = open(path, O_CREAT | O_WRONLY, 0644);
            if (fd < 0 || close(fd) != 0) { perror(path); return -1; }
            break;
        }
        case STAT:
        case STAT_COLD:
            if (stat(path, &st) != 0) { perror(path); return -1; }
            if (!S_ISREG(st.st_mode) || st.st_size != 0) {
                fprintf(stderr, "%s: stat says mode %o size %lld, not an empty file\n",
                        path, (unsigned)st.st_mode, (long long)st.st_size);
                return -1;
            }
            break;
        case UNLINK:
            if (unlink(path) != 0) { perror(path); return -1; }
            break;
        }
    }
    return 0;
}

static int child(const char *dir, int proc, long files, int cold, int go, int done) {
    struct stat st;
    /* Connects (under `labios run`) before the first timed phase. */
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) { perror(dir); put(done, 'e'); return 1; }
    put(done, 'r');
    for (int p = 0; p < PHASES; p++) {
        if (p == STAT_COLD && !cold) continue;
        if (get(go) != 'g') return 1;
        int rc = phase(p, dir, proc, files);
        put(done, rc == 0 ? 'd' : 'e');
        if (rc != 0) return 1;
    }
    /* Untimed check that unlink removed the files. */
    char path[4096];
    for (long i = 0; i < files; i += files > 1 ? files - 1 : 1) {
        snprintf(path, sizeof path, "%s/f.%d.%ld", dir, proc, i);
        if (stat(path, &st) == 0 || errno != ENOENT) {
            fprintf(stderr, "%s: still there after unlink (%s)\n", path, strerror(errno));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [PROCS=2] [FILES=2000] [COLD_WAIT=0]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int procs = argc > 2 ? atoi(argv[2]) : 2;
    long files = argc > 3 ? atol(argv[3]) : 2000;
    double cold_wait = argc > 4 ? atof(argv[4]) : 0;
    if (procs < 1 || files < 1 || cold_wait < 0) {
        fprintf(stderr, "metadata: PROCS and FILES must be >= 1, COLD_WAIT >= 0\n");
        return 2;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { perror(dir); return 1; }

    int go[2], done[2];
    if (pipe(go) != 0 || pipe(done) != 0) { perror("pipe"); return 1; }
    nprocs = procs;
    pids = calloc(procs, sizeof *pids);
    reaped = calloc(procs, sizeof *reaped);
    statuses = calloc(procs, sizeof *statuses);
    fflush(NULL);
    for (int i = 0; i < procs; i++) {
        pids[i] = fork();
        if (pids[i] < 0) { perror("fork"); return 1; }
        if (pids[i] == 0) {
            close(go[1]);
            close(done[0]);
            _exit(child(dir, i, files, cold_wait > 0, go[0], done[1]));
        }
    }
    close(go[0]);
    close(done[1]);

    int failed = 0;
    for (int i = 0; i < procs; i++)
        if (report(done[0]) != 'r') { failed = 1; break; }
    double rate[PHASES] = {0};
    for (int p = 0; p < PHASES && !failed; p++) {
        if (p == STAT_COLD) {
            if (cold_wait == 0) continue;
            struct timespec w = {(time_t)cold_wait, (long)((cold_wait - (time_t)cold_wait) * 1e9)};
            while (nanosleep(&w, &w) != 0 && errno == EINTR) {}
        }
        double t0 = now();
        for (int i = 0; i < procs; i++) put(go[1], 'g');
        for (int i = 0; i < procs; i++)
            if (report(done[0]) != 'd') { failed = 1; break; }
        rate[p] = procs * files / (now() - t0);
    }
    if (failed)
        for (int i = 0; i < procs; i++) kill(pids[i], SIGTERM);
    close(go[1]);
    for (int i = 0; i < procs; i++) {
        if (!reaped[i] && waitpid(pids[i], &statuses[i], 0) < 0) failed = 1;
        if (!WIFEXITED(statuses[i]) || WEXITSTATUS(statuses[i]) != 0) failed = 1;
    }
    if (failed) { fprintf(stderr, "metadata: a process failed (see above)\n"); return 1; }
    for (int p = 0; p < PHASES; p++)
        if (p != STAT_COLD || cold_wait > 0) printf("%s_per_s %.0f\n", names[p], rate[p]);
    return 0;
}
