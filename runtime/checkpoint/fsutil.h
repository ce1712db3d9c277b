/* Durable file-system steps the checkpoint layer is built from: every write is followed by an
 * fsync of the file and of its directory, and every replacement is a rename of a finished file.
 * Errors become diagnostics naming the path and the operating system's reason. */
#ifndef TR_CKPT_FSUTIL_H
#define TR_CKPT_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"

tr_status tr_ckpt_io_error(tr_diags *d, const char *what, const char *path, int err);
tr_status tr_ckpt_mkdir_p(const char *path, tr_diags *d);
tr_status tr_ckpt_fsync_path(const char *path, tr_diags *d); /* a directory or a file */
/* Writes data to dir/name via dir/name.tmp + fsync + rename + fsync(dir). */
tr_status tr_ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t len,
                               bool sync, tr_diags *d);
tr_status tr_ckpt_write_all(int fd, const void *data, size_t len, const char *path, tr_diags *d);
/* Removes a checkpoint directory and the files in it (our directories are flat); refuses a
 * symbolic link or anything else that is not a real directory. */
tr_status tr_ckpt_remove_dir(const char *path, tr_diags *d);
/* The diagnostic for an entry Trestle will not remove or replace because it did not write it. */
tr_status tr_ckpt_refuse(tr_diags *d, const char *path, const char *why);
/* Reads a whole (small) regular file, not through a symbolic link, into a malloc'd
 * NUL-terminated buffer (core/input/file.h's policy). */
tr_status tr_ckpt_read_whole(const char *path, char **out, size_t *len, tr_diags *d);
/* malloc'd "a/b". */
char *tr_ckpt_join(const char *a, const char *b);

#endif
