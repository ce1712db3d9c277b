#include "core/input/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tr_file_open(int dirfd, const char *path, unsigned flags, struct stat *st, int *err) {
    /* O_NONBLOCK only for the open itself: a FIFO opens at once instead of waiting for a
     * writer, and the fstat below refuses it before any read could block. */
    int oflags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    if (flags & TR_FILE_NOFOLLOW) oflags |= O_NOFOLLOW;
    int fd = openat(dirfd, path, oflags);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    struct stat local;
    struct stat *s = st ? st : &local;
    if (fstat(fd, s) != 0 || !S_ISREG(s->st_mode)) {
        *err = S_ISDIR(s->st_mode) ? EISDIR : TR_FILE_ENOTREG;
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *err = 0;
    return fd;
}

FILE *tr_file_fopen(const char *path, unsigned flags, int *err) {
    int fd = tr_file_open(AT_FDCWD, path, flags, NULL, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        *err = errno;
        close(fd);
    }
    return f;
}

int tr_file_read_all(int dirfd, const char *path, unsigned flags, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    struct stat st;
    int err;
    int fd = tr_file_open(dirfd, path, flags, &st, &err);
    if (fd < 0) return err;
    size_t cap = (size_t)st.st_size + 1, got = 0;
    char *buf = malloc(cap);
    while (buf) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            err = errno;
            break;
        }
        if (r == 0) break;
        got += (size_t)r;
        if (got == cap - 1) {
            /* The file grew after fstat: keep reading, doubling the buffer. */
            char *g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
    }
    close(fd);
    if (!buf) return ENOMEM;
    if (err) {
        free(buf);
        return err;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return 0;
}

const char *tr_file_strerror(int err) {
    if (err == TR_FILE_ENOTREG)
        return "not a regular file (FIFOs, devices and sockets are refused)";
    if (err == EISDIR) return "is a directory, not a file";
    if (err == ELOOP) return "is a symbolic link; refusing to follow it";
    return strerror(err);
}
