#include "runtime/checkpoint/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/input/file.h"

tr_status tr_ckpt_io_error(tr_diags *d, const char *what, const char *path, int err) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(d, TR_SEV_ERROR, "checkpoint.io", &o, "checkpoint.save",
                "check that the checkpoint directory is writable and the disk is not full",
                "cannot %s %s: %s", what, path, strerror(err));
    return err == ENOENT ? TR_ERR_NOTFOUND : err == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO;
}

char *tr_ckpt_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

tr_status tr_ckpt_mkdir_p(const char *path, tr_diags *d) {
    char *buf = strdup(path);
    if (!buf) return TR_ERR_NOMEM;
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            tr_status s = tr_ckpt_io_error(d, "create directory", buf, errno);
            free(buf);
            return s;
        }
        buf[i] = c;
    }
    free(buf);
    struct stat st;
    if (stat(path, &st) != 0) return tr_ckpt_io_error(d, "create directory", path, errno);
    if (!S_ISDIR(st.st_mode)) return tr_ckpt_io_error(d, "use as a directory", path, ENOTDIR);
    return TR_OK;
}

tr_status tr_ckpt_fsync_path(const char *path, tr_diags *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tr_ckpt_io_error(d, "open", path, errno);
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    /* Some file systems cannot fsync a directory; the rename is still ordered after it. */
    if (rc != 0 && err != EINVAL && err != EROFS) return tr_ckpt_io_error(d, "fsync", path, err);
    return TR_OK;
}

tr_status tr_ckpt_write_all(int fd, const void *data, size_t len, const char *path, tr_diags *d) {
    const char *p = data;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? (size_t)1 << 30 : len;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return tr_ckpt_io_error(d, "write", path, errno);
        }
        p += w;
        len -= (size_t)w;
    }
    return TR_OK;
}

tr_status tr_ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t len,
                               bool sync, tr_diags *d) {
    char *final = tr_ckpt_join(dir, name);
    char *tmp = final ? malloc(strlen(final) + 5) : NULL;
    if (!tmp) {
        free(final);
        return TR_ERR_NOMEM;
    }
    sprintf(tmp, "%s.tmp", final);
    tr_status s = TR_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) s = tr_ckpt_io_error(d, "create", tmp, errno);
    if (s == TR_OK) s = tr_ckpt_write_all(fd, data, len, tmp, d);
    if (s == TR_OK && sync && fsync(fd) != 0) s = tr_ckpt_io_error(d, "fsync", tmp, errno);
    if (fd >= 0 && close(fd) != 0 && s == TR_OK) s = tr_ckpt_io_error(d, "close", tmp, errno);
    if (s == TR_OK && rename(tmp, final) != 0) s = tr_ckpt_io_error(d, "rename", tmp, errno);
    if (s == TR_OK && sync) s = tr_ckpt_fsync_path(dir, d);
    if (s != TR_OK) unlink(tmp);
    free(tmp);
    free(final);
    return s;
}

tr_status tr_ckpt_remove_dir(const char *path, tr_diags *d) {
    /* Never through a symbolic link: an iter_ entry pointing elsewhere is not ours to empty. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return TR_OK;
    if (fd < 0) {
        int err = errno;
        return tr_ckpt_refuse(d, path,
                              err == ELOOP || err == ENOTDIR
                                  ? "it is not a directory Trestle created (a symbolic link "
                                    "or a file); remove it by hand if it is not needed"
                                  : strerror(err));
    }
    DIR *dir = fdopendir(fd);
    if (!dir) {
        int err = errno;
        close(fd);
        return tr_ckpt_io_error(d, "open directory", path, err);
    }
    tr_status s = TR_OK;
    struct dirent *ent;
    while (s == TR_OK && (ent = readdir(dir)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
        /* Only files: unlinking a link removes the link, and a directory inside a checkpoint
         * was not written by Trestle, so it stays (and the rmdir below reports it). */
        if (unlinkat(dirfd(dir), ent->d_name, 0) != 0 && errno != ENOENT) {
            char *p = tr_ckpt_join(path, ent->d_name);
            s = tr_ckpt_io_error(d, "remove", p ? p : path, errno);
            free(p);
        }
    }
    closedir(dir);
    if (s == TR_OK && rmdir(path) != 0 && errno != ENOENT)
        s = tr_ckpt_io_error(d, "remove directory", path, errno);
    return s;
}

tr_status tr_ckpt_refuse(tr_diags *d, const char *path, const char *why) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(d, TR_SEV_ERROR, "checkpoint.not_owned", &o, "checkpoint.save",
                "Trestle removes and replaces only the directories it wrote",
                "refusing to remove or replace %s: %s", path, why);
    return TR_ERR_INVALID;
}

tr_status tr_ckpt_read_whole(const char *path, char **out, size_t *len, tr_diags *d) {
    int err = tr_file_read_all(AT_FDCWD, path, TR_FILE_NOFOLLOW, out, len);
    if (err == 0) return TR_OK;
    if (err == ENOMEM) return TR_ERR_NOMEM;
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(d, TR_SEV_ERROR, "checkpoint.io", &o, "checkpoint.load",
                "checkpoint files must be regular files inside the checkpoint directory",
                "cannot read %s: %s", path, tr_file_strerror(err));
    return err == ENOENT                                             ? TR_ERR_NOTFOUND
           : err == TR_FILE_ENOTREG || err == ELOOP || err == EISDIR ? TR_ERR_INVALID
                                                                     : TR_ERR_IO;
}
