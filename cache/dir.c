/* dir.c — where the disk level lives: choosing the directory, creating it,
 * and deciding whether it can be trusted with code that kiln will load. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/internal.h"

static const char *nonempty_env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* $HOME, else the password database's entry, as the shell's ~ does. */
static char *home_dir(void) {
    const char *home = nonempty_env("HOME");
    if (home)
        return strdup(home);
    struct passwd pw, *found = NULL;
    char buf[16384];
    if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &found) != 0 || !found || !pw.pw_dir[0])
        return NULL;
    return strdup(pw.pw_dir);
}

static char *join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 2);
    if (s) {
        memcpy(s, a, na);
        s[na] = '/';
        memcpy(s + na + 1, b, nb + 1);
    }
    return s;
}

/* The XDG base directory specification says to ignore a relative
 * XDG_CACHE_HOME. */
static char *choose(const char *dir, char *msg, size_t msgcap) {
    char *path;
    const char *env = nonempty_env("KILN_CACHE_DIR");
    const char *xdg = nonempty_env("XDG_CACHE_HOME");
    if (dir && dir[0]) {
        path = strdup(dir);
    } else if (env) {
        path = strdup(env);
    } else if (xdg && xdg[0] == '/') {
        path = join(xdg, "kiln");
    } else {
        char *home = home_dir();
        if (!home) {
            snprintf(msg, msgcap, "kiln cache: no home directory to put ~/.cache/kiln in");
            return NULL;
        }
        path = join(home, ".cache/kiln");
        free(home);
    }
    if (!path)
        snprintf(msg, msgcap, "kiln cache: out of memory");
    return path;
}

/* mkdir -p with mode 0700 for every directory it creates. */
static bool make_dirs(char *path, char *msg, size_t msgcap) {
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        /* Whatever mkdir says of an existing directory (EEXIST, or EACCES or
         * EROFS on some file systems), it is there to use. */
        if (mkdir(path, 0700) != 0) {
            int err = errno;
            if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(msg, msgcap, "kiln cache: cannot create %s: %s", path,
                         strerror(err == EEXIST ? ENOTDIR : err));
                return false;
            }
        }
        *p = c;
        if (c == '\0')
            return true;
    }
}

char *cache_dir_prepare(const char *dir, char *msg, size_t msgcap) {
    char *path = choose(dir, msg, msgcap);
    if (!path)
        return NULL;
    if (!make_dirs(path, msg, msgcap)) {
        free(path);
        return NULL;
    }
    /* Absolute, so that the paths handed to dlopen do not depend on the
     * working directory. */
    char *real = realpath(path, NULL);
    if (!real)
        snprintf(msg, msgcap, "kiln cache: %s: %s", path, strerror(errno));
    free(path);
    return real;
}

bool cache_dir_trusted(const char *dir, char *msg, size_t msgcap) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(msg, msgcap, "kiln cache: %s: %s", dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(msg, msgcap, "kiln cache: %s is not a directory", dir);
        return false;
    }
    if (st.st_uid != geteuid()) {
        snprintf(msg, msgcap, "kiln cache: %s is owned by uid %ld, not by uid %ld", dir,
                 (long)st.st_uid, (long)geteuid());
        return false;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(msg, msgcap,
                 "kiln cache: %s is writable by group or others (mode %04o): "
                 "kiln would load code from it",
                 dir, (unsigned)(st.st_mode & 07777));
        return false;
    }
    return true;
}
