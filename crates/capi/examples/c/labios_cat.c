/*
 * labios_cat.c: copies LABIOS files to standard output, as the application
 * whose credentials are in LABIOS_KEY and LABIOS_SECRET (none: the local
 * default application), at LABIOS_ENDPOINT.
 *
 *   cc labios_cat.c $(pkg-config --cflags --libs labios) -o labios_cat
 *   LABIOS_ENDPOINT=/srv/labios/labios.sock ./labios_cat /runs/42/log.txt
 *
 * On failure it names the status code as labios.h does, with its
 * description and the message of the failure, and exits with 1.
 */
#include <labios.h>

#include <stdio.h>

static const char *code_name(int rc) {
    switch (rc) {
    case LABIOS_OK: return "LABIOS_OK";
    case LABIOS_ENOTFOUND: return "LABIOS_ENOTFOUND";
    case LABIOS_EEXIST: return "LABIOS_EEXIST";
    case LABIOS_EINVAL: return "LABIOS_EINVAL";
    case LABIOS_EPERM: return "LABIOS_EPERM";
    case LABIOS_EFULL: return "LABIOS_EFULL";
    case LABIOS_ETIMEDOUT: return "LABIOS_ETIMEDOUT";
    case LABIOS_EFAILED: return "LABIOS_EFAILED";
    case LABIOS_EIO: return "LABIOS_EIO";
    case LABIOS_EUNAVAILABLE: return "LABIOS_EUNAVAILABLE";
    default: return "unknown";
    }
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "labios_cat: %s: %s (%d, %s): %s\n", what, code_name(rc),
            rc, labios_strerror(rc), labios_last_error());
    return 1;
}

int main(int argc, char **argv) {
    static unsigned char buf[1 << 16];
    labios_t *h = NULL;
    int rc, i, status = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH...\n", argv[0]);
        return 2;
    }
    rc = labios_connect(NULL, NULL, NULL, &h);
    if (rc != LABIOS_OK)
        return fail("connect", rc);
    for (i = 1; i < argc; i++) {
        uint64_t offset = 0;
        size_t nread;
        do {
            rc = labios_read(h, argv[i], offset, buf, sizeof buf, &nread);
            if (rc != LABIOS_OK) {
                status = fail(argv[i], rc);
                break;
            }
            if (fwrite(buf, 1, nread, stdout) != nread) {
                perror("labios_cat: stdout");
                status = 1;
                break;
            }
            offset += nread;
        } while (nread == sizeof buf);
    }
    rc = labios_disconnect(h);
    if (rc != LABIOS_OK && status == 0)
        status = fail("disconnect", rc);
    return status;
}
