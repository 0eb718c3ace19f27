/*
 * test_run.h — runs the deja binary from a test and captures its output.
 */
#ifndef DJ_TEST_RUN_H
#define DJ_TEST_RUN_H

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *deja_bin;

/* Runs argv (argv[0] = deja binary), captures stdout+stderr; returns the exit status. */
static inline int run(char *const *argv, char **out) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
        ssize_t got = read(fd[0], buf + n, cap - n - 1);
        if (got <= 0) break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* RUN(&out, "inspect", path): argv after the binary; returns the exit status. */
#define RUN(out, ...) run((char *const[]){(char *)deja_bin, __VA_ARGS__, NULL}, out)

#endif
