/* capture.h — what a test's kiln prints on stderr (KILN_DEBUG lines), caught
 * in a temporary file. Needs _GNU_SOURCE (or POSIX) before the first include
 * of the system headers, for mkstemp and dup. */
#ifndef KILN_TESTS_CAPTURE_H
#define KILN_TESTS_CAPTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct tu_capture {
    char path[40];
    int fd, saved;
} tu_capture;

/* From now on stderr goes to a file of c's. */
static inline void tu_capture_begin(tu_capture *c) {
    snprintf(c->path, sizeof c->path, "/tmp/kiln-stderr-XXXXXX");
    c->fd = mkstemp(c->path);
    cr_assert(c->fd >= 0, "no temporary file for stderr");
    fflush(stderr);
    c->saved = dup(2);
    dup2(c->fd, 2);
}

/* Gives stderr back and puts what was written to it in text (cap bytes at
 * most, NUL included); the file goes. */
static inline void tu_capture_end(tu_capture *c, char *text, size_t cap) {
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    ssize_t n = pread(c->fd, text, cap - 1, 0);
    text[n > 0 ? n : 0] = 0;
    close(c->fd);
    unlink(c->path);
}

#endif /* KILN_TESTS_CAPTURE_H */
