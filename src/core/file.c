/*
 * file.c — see file.h.  Grows the buffer by doubling, so it also works on
 * pipes and files whose size changes while they are read.
 */
#include "core/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

enum dj_status dj_read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return dj_fail(DJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = cap < ((size_t)-1) / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    const int err = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf) return dj_fail(DJ_ERR_NOMEM, "%s: out of memory reading the file", path);
    if (err) {
        free(buf);
        return dj_fail(DJ_ERR_IO, "%s: read error: %s", path, strerror(err));
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DJ_OK;
}
