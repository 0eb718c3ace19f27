/*
 * file.h — reading a whole file into memory (prompts, traces, small inputs).
 * Models are mapped by the GGUF reader instead.
 */
#ifndef DJ_CORE_FILE_H
#define DJ_CORE_FILE_H

#include <stddef.h>

#include "deja.h"

/* Reads `path` into a malloc'd buffer with a NUL after the last byte; *out and
 * *len set only on DJ_OK (caller frees).  DJ_ERR_IO / DJ_ERR_NOMEM with a
 * message naming the path otherwise. */
enum dj_status dj_read_file(const char *path, char **out, size_t *len);

#endif
