/*
 * labios.h: the C API of LABIOS, label-based distributed I/O.
 *
 * Link with `pkg-config --cflags --libs labios` (scripts/install-capi.sh).
 * Every function returns LABIOS_OK (0) or a negative labios_status;
 * labios_last_error() gives the message of the calling thread's last failure.
 * A handle may be used from several threads at once. C++ and Fortran
 * (ISO_C_BINDING) call these functions as they are.
 */
#ifndef LABIOS_H
#define LABIOS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct labios labios_t;
/* An asynchronous write in flight; wait on it once. */
typedef uint64_t labios_ticket_t;

enum labios_status {
    LABIOS_OK = 0,
    LABIOS_ENOTFOUND = -1,
    LABIOS_EEXIST = -2,
    LABIOS_EINVAL = -3,
    LABIOS_EPERM = -4,       /* another application's data */
    LABIOS_EFULL = -5,       /* queue or warehouse full (backpressure) */
    LABIOS_ETIMEDOUT = -6,
    LABIOS_EFAILED = -7,     /* a label failed on a worker */
    LABIOS_EIO = -8,
    LABIOS_EUNAVAILABLE = -9, /* LABIOS cannot be reached */
    LABIOS_ELOCKED = -10 /* a file lock is held by another owner */
};

typedef struct {
    uint64_t size;
    uint32_t mode;
    int is_dir;
    uint64_t mtime_ns; /* nanoseconds since the epoch */
    uint64_t id;       /* file id in the inventory */
} labios_stat_t;

/* Connects to `labios serve` at `endpoint` (a Unix socket path or HOST:PORT)
 * as the application with `key` and `secret`. NULL arguments come from
 * LABIOS_ENDPOINT, LABIOS_KEY, LABIOS_SECRET and the file in LABIOS_CONFIG,
 * as for the `labios` command. */
int labios_connect(const char *endpoint, const char *key, const char *secret,
                   labios_t **out);
/* Connects as the TOML configuration file says (embedded or distributed). */
int labios_connect_config(const char *config_path, const char *key,
                          const char *secret, labios_t **out);
/* Waits for everything in flight, then frees the handle (NULL is a no-op). */
int labios_disconnect(labios_t *h);

/* Synchronous: returns when the bytes are stored by a worker. */
int labios_write(labios_t *h, const char *path, uint64_t offset,
                 const void *buf, size_t len);
/* Reads up to len bytes; *nread < len only at end of file. */
int labios_read(labios_t *h, const char *path, uint64_t offset, void *buf,
                size_t len, size_t *nread);

/* Asynchronous: returns once the write's labels are published, or, for a
 * write smaller than the client's min_label_size, cached to be merged with
 * the next small writes of the file (as a stdio stream buffers). The bytes
 * are copied; buf may be reused at once. A wait, labios_disconnect, or the
 * process's exit() publishes and lands them. */
int labios_write_async(labios_t *h, const char *path, uint64_t offset,
                       const void *buf, size_t len, labios_ticket_t *ticket);
int labios_wait(labios_t *h, labios_ticket_t ticket);
/* Waits for n tickets; returns the first failure among them. */
int labios_wait_many(labios_t *h, const labios_ticket_t *tickets, size_t n);
/* Waits for everything this handle has in flight. */
int labios_wait_all(labios_t *h);

int labios_stat(labios_t *h, const char *path, labios_stat_t *st);
int labios_mkdir(labios_t *h, const char *path);
/* A file and its data on every worker, or an empty directory. */
int labios_remove(labios_t *h, const char *path);
int labios_rename(labios_t *h, const char *from, const char *to);
int labios_truncate(labios_t *h, const char *path, uint64_t size);
/* Makes the file's writes durable on the workers' devices. */
int labios_flush(labios_t *h, const char *path);
/* Calls cb(ctx, name, is_dir) for each entry directly in dir; a non-zero
 * return from cb stops the listing. */
int labios_list(labios_t *h, const char *dir,
                int (*cb)(void *ctx, const char *name, int is_dir), void *ctx);

/* Software-defined storage. A pipeline is text: functions separated by '|',
 * each NAME or NAME:KEY=VALUE,KEY=VALUE ("sort:dtype=i64|zstd:level=19");
 * `labios function builtins` lists the built-ins.
 *
 * Computational storage: the worker stores what the pipeline makes of buf;
 * returns once the data is staged, wait on the ticket for the write. */
int labios_write_pipeline(labios_t *h, const char *path, uint64_t offset,
                          const void *buf, size_t len, const char *pipeline,
                          labios_ticket_t *ticket);
/* In-situ analytics: runs the pipeline over the whole file where it is
 * stored; *out receives only the result (free it with labios_free). */
int labios_query(labios_t *h, const char *path, const char *pipeline,
                 void **out, size_t *out_len);
void labios_free(void *p);
/* Registers a WebAssembly module (binary or WAT) as this application's
 * private function NAME, usable in its pipelines only. */
int labios_register_function(labios_t *h, const char *name, const void *module,
                             size_t len);

/* Extended attributes of a file or directory: its `user.` ones, which
 * every client and `labios run` see; hints are the `user.labios.*` ones
 * (README "Hints": placement, replicas, replication, block_size,
 * cache_size, tier, route). A hint or value LABIOS does not take is
 * LABIOS_EINVAL, and labios_last_error() names it. labios_getxattr puts a
 * copy of the value in *out (free it with labios_free) and its size in
 * *out_len; getting or removing an attribute the entry does not have is
 * LABIOS_ENOTFOUND. labios_listxattr calls cb(ctx, name) for each name; a
 * non-zero return from cb stops it. */
int labios_setxattr(labios_t *h, const char *path, const char *name,
                    const void *value, size_t len);
int labios_getxattr(labios_t *h, const char *path, const char *name,
                    void **out, size_t *out_len);
int labios_removexattr(labios_t *h, const char *path, const char *name);
int labios_listxattr(labios_t *h, const char *path,
                     int (*cb)(void *ctx, const char *name), void *ctx);

/* Administration. Changes running worker `worker`'s I/O stack to `spec`
 * (module names, comma-separated, the backend last: "checksum,zstd,file";
 * README "Worker I/O stacks"), as `labios stack set` does, and returns once
 * the worker runs it. Only the service may: the session's configuration
 * must lead to the service's secret (embedded: the data directory of
 * `labios serve`, LABIOS_DATA_DIR; distributed: its service credentials),
 * else LABIOS_EPERM. An unknown worker is LABIOS_ENOTFOUND; a malformed
 * spec, or one with another backend than the worker's, LABIOS_EINVAL. */
int labios_stack_set(labios_t *h, uint32_t worker, const char *spec);

/* A fixed description of a status code. */
const char *labios_strerror(int code);
/* The message of this thread's last failure; valid until its next one. */
const char *labios_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* LABIOS_H */
