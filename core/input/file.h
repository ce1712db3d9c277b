/* The one file-system policy for everything Trestle reads: config files, datasets, tokenizers,
 * checkpoints. A path is opened without blocking (a FIFO or a device must not hang the run), its
 * type is checked on the open descriptor before the first byte is read (no window between a
 * check and the open), and only regular files are read. Callers that read inside a directory
 * they own (a checkpoint) also refuse a symbolic link as the last component.
 *
 * Errors are errno values, plus TR_FILE_ENOTREG for "exists but is not a regular file", so each
 * caller words its own diagnostic; tr_file_strerror describes both kinds. */
#ifndef TR_FILE_H
#define TR_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#define TR_FILE_NOFOLLOW 1u /* refuse a symbolic link as the last path component */

#define TR_FILE_ENOTREG 4096 /* beyond every errno value */

/* Opens dirfd/path (AT_FDCWD for a plain path) read-only as a regular file; returns the
 * descriptor (blocking mode restored) or -1 with *err set. st, when not NULL, receives fstat. */
int tr_file_open(int dirfd, const char *path, unsigned flags, struct stat *st, int *err);
/* The same as a stdio stream ("rb"). */
FILE *tr_file_fopen(const char *path, unsigned flags, int *err);
/* Reads the whole file into a malloc'd NUL-terminated buffer; 0 or an error. */
int tr_file_read_all(int dirfd, const char *path, unsigned flags, char **out, size_t *len);
/* strerror, with the text of TR_FILE_ENOTREG ("not a regular file ..."). */
const char *tr_file_strerror(int err);

#endif
