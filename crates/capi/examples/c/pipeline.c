/* Software-defined storage from C: a write the worker sorts and compresses
 * before storing it, then an in-situ query that returns only the median,
 * and a private WebAssembly function given as WAT text on the command line.
 *
 *   pipeline /dir/values.i64 FUNCTION.wat   (LABIOS_ENDPOINT names the server)
 */
#include <labios.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(int rc, const char *what) {
    if (rc != LABIOS_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, labios_strerror(rc), labios_last_error());
        exit(2);
    }
    return rc;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(*len + 1);
    if (!buf || fread(buf, 1, *len, f) != *len) { perror(path); exit(2); }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: pipeline LABIOS_PATH MODULE.wat\n");
        return 2;
    }
    labios_t *h;
    check(labios_connect(NULL, NULL, NULL, &h), "connect");
    enum { N = 100001 };
    int64_t *values = malloc(N * sizeof *values);
    for (int64_t i = 0; i < N; i++) values[i] = (i * 7919) % N - N / 2;
    labios_ticket_t t;
    check(labios_write_pipeline(h, argv[1], 0, values, N * sizeof *values,
                                "sort:dtype=i64|zstd:level=9", &t), "write_pipeline");
    check(labios_wait(h, t), "wait");
    void *out;
    size_t len;
    check(labios_query(h, argv[1], "unzstd|median:dtype=i64", &out, &len), "query");
    printf("median: %.*s\n", (int)len, (char *)out);
    labios_free(out);
    labios_stat_t st;
    check(labios_stat(h, argv[1], &st), "stat");
    printf("stored %s bytes of %zu\n", st.size < N * sizeof *values / 2 ? "fewer" : "more",
           N * sizeof *values);
    size_t mlen;
    char *module = slurp(argv[2], &mlen);
    check(labios_register_function(h, "upper", module, mlen), "register_function");
    check(labios_write(h, "/c-pipeline/hello.txt", 0, "hello from c", 12), "write");
    check(labios_query(h, "/c-pipeline/hello.txt", "upper", &out, &len), "query upper");
    printf("upper: %.*s\n", (int)len, (char *)out);
    labios_free(out);
    int rc = labios_query(h, "/c-pipeline/hello.txt", "nosuch", &out, &len);
    printf("nosuch: %s: %s\n", labios_strerror(rc), labios_last_error());
    free(module);
    free(values);
    return labios_disconnect(h) == LABIOS_OK ? 0 : 1;
}
