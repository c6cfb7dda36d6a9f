/* Administration from C: changes a running worker's I/O stack, as
 * `labios stack set` does (README "Worker I/O stacks").
 *
 *   stack_set WORKER SPEC     e.g. stack_set 1 checksum,zstd,file
 *
 * LABIOS_ENDPOINT names the server; LABIOS_DATA_DIR (or the file in
 * LABIOS_CONFIG) its data directory, where the service's secret is. */
#include <labios.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: stack_set WORKER SPEC\n");
        return 2;
    }
    char *end;
    unsigned long worker = strtoul(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0') {
        fprintf(stderr, "stack_set: WORKER must be a number, got %s\n", argv[1]);
        return 2;
    }
    labios_t *h;
    int rc = labios_connect(NULL, NULL, NULL, &h);
    if (rc != LABIOS_OK) {
        fprintf(stderr, "stack_set: connect: %s: %s\n", labios_strerror(rc), labios_last_error());
        return 2;
    }
    rc = labios_stack_set(h, (uint32_t)worker, argv[2]);
    if (rc == LABIOS_OK) {
        printf("worker %lu runs %s\n", worker, argv[2]);
    } else {
        fprintf(stderr, "stack_set: %s (%d): %s\n", labios_strerror(rc), rc, labios_last_error());
    }
    labios_disconnect(h);
    return rc == LABIOS_OK ? 0 : 1;
}
