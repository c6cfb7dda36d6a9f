/* Hints from C (README "Hints"): gives a new file a placement and a
 * number of copies as `user.labios.*` attributes, lists and reads them
 * back, and shows a value LABIOS refuses.
 *
 *   hints PATH
 *
 * LABIOS_ENDPOINT names the server. */
#include <labios.h>
#include <stdio.h>
#include <string.h>

static int print_name(void *ctx, const char *name) {
    (void)ctx;
    printf(" %s", name);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: hints PATH\n");
        return 2;
    }
    const char *path = argv[1];
    labios_t *h;
    int rc = labios_connect(NULL, NULL, NULL, &h);
    if (rc != LABIOS_OK) {
        fprintf(stderr, "hints: connect: %s: %s\n", labios_strerror(rc), labios_last_error());
        return 2;
    }
    int failed = 0;
    const char *placement = "collocate:g1", *replicas = "2";
    if (labios_write(h, path, 0, "", 0) != LABIOS_OK
        || labios_setxattr(h, path, "user.labios.placement", placement, strlen(placement)) != LABIOS_OK
        || labios_setxattr(h, path, "user.labios.replicas", replicas, strlen(replicas)) != LABIOS_OK) {
        fprintf(stderr, "hints: %s\n", labios_last_error());
        failed = 1;
    }
    printf("names:");
    labios_listxattr(h, path, print_name, NULL);
    printf("\n");
    void *value;
    size_t len;
    if (labios_getxattr(h, path, "user.labios.placement", &value, &len) == LABIOS_OK) {
        printf("placement %.*s\n", (int)len, (const char *)value);
        labios_free(value);
    } else {
        failed = 1;
    }
    rc = labios_setxattr(h, path, "user.labios.replicas", "nine", 4);
    printf("refused: %s (%d): %s\n", labios_strerror(rc), rc, labios_last_error());
    int removed = labios_removexattr(h, path, "user.labios.replicas");
    rc = labios_getxattr(h, path, "user.labios.replicas", &value, &len);
    printf("removed: %s (%d), then %s (%d)\n", labios_strerror(removed), removed,
           labios_strerror(rc), rc);
    labios_disconnect(h);
    return failed;
}
