/*
 * test_kvdir.h — the block files of a persistent KV directory (src/kv/persist.h:
 * DIR/<key>/<chain>.kvb), for tests that count or damage them.
 */
#ifndef DJ_TEST_KVDIR_H
#define DJ_TEST_KVDIR_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* The *.kvb files under dir/<key>/ (the ids cache and dot entries skipped): their
 * paths in paths[0 .. max) when paths is not NULL; returns how many there are (all of
 * them without paths, at most max with).  0 when dir does not exist. */
static inline size_t test_kv_block_files(const char *dir, char (*paths)[512], size_t max) {
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "ids")) continue;
        char sub[512];
        snprintf(sub, sizeof sub, "%.250s/%.250s", dir, de->d_name);
        DIR *k = opendir(sub);
        if (!k) continue;
        struct dirent *f;
        while ((f = readdir(k)) && (!paths || n < max)) {
            const size_t l = strlen(f->d_name);
            if (l <= 4 || l >= 200 || strcmp(f->d_name + l - 4, ".kvb")) continue;
            if (paths) snprintf(paths[n], 512, "%.300s/%.200s", sub, f->d_name);
            n++;
        }
        closedir(k);
    }
    closedir(d);
    return n;
}

#endif
