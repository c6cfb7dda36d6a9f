/*
 * checkpoint.c: a simulation that checkpoints its state through LABIOS.
 *
 *   cc checkpoint.c $(pkg-config --cflags --libs labios) -o checkpoint
 *   ./checkpoint [-e ENDPOINT] [-k KEY -s SECRET] [-d DIR] [-r RANKS]
 *
 * Options left out come from LABIOS_ENDPOINT, LABIOS_KEY and LABIOS_SECRET
 * (no key: the local default application). DIR defaults to
 * /checkpoints/run-PID.
 *
 * Step 0 is written synchronously: labios_write returns once a worker has
 * stored every byte. Step 1 is written by RANKS simulated ranks, each
 * publishing its slab asynchronously (labios_write_async returns as soon as
 * the labels are published) while the program keeps computing; then one
 * labios_wait_many. Both checkpoints are read back and compared byte for
 * byte, stat'ed and listed, and a read of a missing checkpoint shows the
 * error path. Exit status: 0 success, 1 verification failure, 2 LABIOS or
 * usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <labios.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYNC_BYTES (3u * 1024u * 1024u + 12345u) /* several labels */
#define SLAB_BYTES (768u * 1024u)                /* per rank, asynchronous */
#define MAX_RANKS 64

/* Reports a failed LABIOS call: the fixed text of the code and the message
 * of this thread's last failure. */
static int report(const char *what, int rc) {
    fprintf(stderr, "checkpoint: %s: %s (%d): %s\n", what, labios_strerror(rc),
            rc, labios_last_error());
    return 2;
}

/* The state of the simulation: deterministic, so that it can be checked. */
static void fill(unsigned char *buf, size_t len, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i;
    for (i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)(x >> 24);
    }
}

/* Reads `path` whole (expected `len` bytes) and compares it with `want`. */
static int verify(labios_t *h, const char *path, const unsigned char *want,
                  size_t len) {
    /* One byte more than expected: a longer file shows up as nread > len. */
    unsigned char *got = malloc(len + 1);
    size_t nread = 0, i;
    int rc;
    if (got == NULL) {
        perror("malloc");
        return 2;
    }
    rc = labios_read(h, path, 0, got, len + 1, &nread);
    if (rc != LABIOS_OK) {
        free(got);
        return report(path, rc);
    }
    if (nread != len) {
        fprintf(stderr, "checkpoint: %s: read %zu bytes, expected %zu\n", path,
                nread, len);
        free(got);
        return 1;
    }
    for (i = 0; i < len; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr,
                    "checkpoint: %s: byte %zu is 0x%02x, expected 0x%02x\n",
                    path, i, got[i], want[i]);
            free(got);
            return 1;
        }
    }
    free(got);
    printf("verified %s: %zu bytes identical\n", path, len);
    return 0;
}

static int check_stat(labios_t *h, const char *path, uint64_t size) {
    labios_stat_t st;
    int rc = labios_stat(h, path, &st);
    if (rc != LABIOS_OK)
        return report(path, rc);
    printf("stat %s: size %" PRIu64 ", mode %o, id %" PRIu64 "\n", path,
           st.size, (unsigned)st.mode, st.id);
    if (st.is_dir || st.size != size) {
        fprintf(stderr, "checkpoint: %s: is_dir %d, size %" PRIu64
                        ", expected a file of %" PRIu64 " bytes\n",
                path, st.is_dir, st.size, size);
        return 1;
    }
    return 0;
}

struct listing {
    int files;
    int dirs;
};

static int print_entry(void *ctx, const char *name, int is_dir) {
    struct listing *l = ctx;
    printf("  %s%s\n", name, is_dir ? "/" : "");
    if (is_dir)
        l->dirs++;
    else
        l->files++;
    return 0; /* non-zero would stop the listing */
}

/* Creates dir and its parents; existing directories are fine. */
static int mkdirs(labios_t *h, const char *dir) {
    char path[512];
    size_t i, n = strlen(dir);
    int rc;
    if (n == 0 || n >= sizeof path)
        return LABIOS_EINVAL;
    memcpy(path, dir, n + 1);
    for (i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        rc = labios_mkdir(h, path);
        if (rc != LABIOS_OK && rc != LABIOS_EEXIST)
            return rc;
        path[i] = dir[i];
    }
    return LABIOS_OK;
}

int main(int argc, char **argv) {
    const char *endpoint = NULL, *key = NULL, *secret = NULL;
    char dir[256], step0[320], step1[320], missing[320];
    unsigned char *state = NULL, *slab = NULL, *expect1 = NULL;
    labios_ticket_t tickets[MAX_RANKS];
    struct listing listing = {0, 0};
    size_t nread = 0;
    unsigned char tail[4096];
    int ranks = 4, opt, rc, r, status = 0;
    double energy = 0;
    labios_t *h = NULL;

    snprintf(dir, sizeof dir, "/checkpoints/run-%ld", (long)getpid());
    while ((opt = getopt(argc, argv, "e:k:s:d:r:h")) != -1) {
        switch (opt) {
        case 'e': endpoint = optarg; break;
        case 'k': key = optarg; break;
        case 's': secret = optarg; break;
        case 'd': snprintf(dir, sizeof dir, "%s", optarg); break;
        case 'r': ranks = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-e ENDPOINT] [-k KEY -s SECRET] "
                            "[-d DIR] [-r RANKS]\n", argv[0]);
            return 2;
        }
    }
    if (ranks < 1 || ranks > MAX_RANKS) {
        fprintf(stderr, "checkpoint: RANKS must be 1..%d\n", MAX_RANKS);
        return 2;
    }
    snprintf(step0, sizeof step0, "%s/step-0000.ckpt", dir);
    snprintf(step1, sizeof step1, "%s/step-0001.ckpt", dir);
    snprintf(missing, sizeof missing, "%s/step-9999.ckpt", dir);

    rc = labios_connect(endpoint, key, secret, &h);
    if (rc != LABIOS_OK)
        return report("connect", rc);
    printf("connected to %s\n", endpoint ? endpoint
                                : getenv("LABIOS_ENDPOINT") ? getenv("LABIOS_ENDPOINT")
                                : "the configured LABIOS");

    state = malloc(SYNC_BYTES);
    slab = malloc(SLAB_BYTES);
    expect1 = malloc((size_t)ranks * SLAB_BYTES);
    if (state == NULL || slab == NULL || expect1 == NULL) {
        perror("malloc");
        status = 2;
        goto out;
    }
    rc = mkdirs(h, dir);
    if (rc != LABIOS_OK) {
        status = report(dir, rc);
        goto out;
    }

    /* Step 0, synchronous: when labios_write returns, the bytes are stored. */
    fill(state, SYNC_BYTES, 0);
    rc = labios_write(h, step0, 0, state, SYNC_BYTES);
    if (rc != LABIOS_OK) {
        status = report(step0, rc);
        goto out;
    }
    printf("step 0: wrote %u bytes synchronously to %s\n", SYNC_BYTES, step0);

    /* Step 1, asynchronous: each rank publishes its slab and computes on.
     * The library copies the bytes, so the one slab buffer is reused. */
    for (r = 0; r < ranks; r++) {
        fill(slab, SLAB_BYTES, 1000 + (uint64_t)r);
        memcpy(expect1 + (size_t)r * SLAB_BYTES, slab, SLAB_BYTES);
        rc = labios_write_async(h, step1, (uint64_t)r * SLAB_BYTES, slab,
                                SLAB_BYTES, &tickets[r]);
        if (rc != LABIOS_OK) {
            status = report("write_async", rc);
            goto out;
        }
        memset(slab, 0xEE, SLAB_BYTES); /* reuse at once: must not matter */
    }
    printf("step 1: published %d asynchronous writes of %u bytes\n", ranks,
           SLAB_BYTES);
    for (r = 0; r < 1000000; r++) /* the next compute phase overlaps the I/O */
        energy += 1.0 / (1.0 + r);
    rc = labios_wait_many(h, tickets, (size_t)ranks);
    if (rc != LABIOS_OK) {
        status = report("wait_many", rc);
        goto out;
    }
    printf("step 1: all %d writes complete (energy %.3f)\n", ranks, energy);

    /* Read back, byte for byte. */
    if ((status = verify(h, step0, state, SYNC_BYTES)) != 0)
        goto out;
    if ((status = verify(h, step1, expect1, (size_t)ranks * SLAB_BYTES)) != 0)
        goto out;

    /* A read that reaches past the end returns what there is. */
    rc = labios_read(h, step0, SYNC_BYTES - 100, tail, sizeof tail, &nread);
    if (rc != LABIOS_OK) {
        status = report(step0, rc);
        goto out;
    }
    if (nread != 100 || memcmp(tail, state + SYNC_BYTES - 100, 100) != 0) {
        fprintf(stderr, "checkpoint: read at end of file gave %zu bytes, "
                        "expected the last 100\n", nread);
        status = 1;
        goto out;
    }
    printf("short read at end of file: %zu bytes\n", nread);

    if ((status = check_stat(h, step0, SYNC_BYTES)) != 0 ||
        (status = check_stat(h, step1, (uint64_t)ranks * SLAB_BYTES)) != 0)
        goto out;

    printf("ls %s:\n", dir);
    rc = labios_list(h, dir, print_entry, &listing);
    if (rc != LABIOS_OK) {
        status = report(dir, rc);
        goto out;
    }
    if (listing.files != 2 || listing.dirs != 0) {
        fprintf(stderr, "checkpoint: %s lists %d files and %d directories, "
                        "expected 2 files\n", dir, listing.files, listing.dirs);
        status = 1;
        goto out;
    }

    /* The error path: a checkpoint that was never written. */
    rc = labios_read(h, missing, 0, tail, sizeof tail, &nread);
    if (rc == LABIOS_OK) {
        fprintf(stderr, "checkpoint: reading %s succeeded\n", missing);
        status = 1;
        goto out;
    }
    printf("reading %s fails as it should: %s (%d): %s\n", missing,
           labios_strerror(rc), rc, labios_last_error());
    if (rc != LABIOS_ENOTFOUND) {
        status = 1;
        goto out;
    }

out:
    rc = labios_disconnect(h);
    if (rc != LABIOS_OK && status == 0)
        status = report("disconnect", rc);
    free(state);
    free(slab);
    free(expect1);
    if (status == 0)
        printf("checkpoint: OK\n");
    return status;
}
