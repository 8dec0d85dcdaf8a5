/*
 * fs/ingest.h - files written into ingest/.
 */
#ifndef VECFS_FS_INGEST_H
#define VECFS_FS_INGEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct fs_daemon fs_daemon;
typedef struct ingest ingest;

#define INGEST_BUFFER_MB_DEFAULT 256 /* -o ingest_buffer_mb */

/* The format for a file name, or -1 when its ending is not one vecfs reads. */
int fs_ingest_format_of(const char *name);
/* The same, also for a staged name (NAME.EXT.part: the format of NAME.EXT). */
int fs_ingest_format_staged(const char *name);
/* 1 for a staged name: NAME.EXT.part with a format's EXT. */
int fs_ingest_is_staged(const char *name);
/* A file made by process `opener` (its pid); NULL when out of memory or
 * past the budget of -o ingest_buffer_mb (an errors line says so). */
ingest *fs_ingest_new(fs_daemon *dm, const char *name, int format, uint64_t opener);
/* A writer of the root's `delete` file (process `opener`): keys a line and
 * at most one filter= line, read as an ingest file's text is; its commit
 * deletes them in one transaction (stats' last_delete). */
ingest *fs_ingest_new_delete(fs_daemon *dm, uint64_t opener);
void fs_ingest_free(ingest *in);
/* Parse bytes written at offset off (which must be the file's end) by lock
 * owner `owner`.  Rows are validated as they complete; a bad row fails
 * with -EINVAL (and an errors line), after which the file is dead: nothing
 * of it is committed.  A staged file keeps its bad rows quiet until its
 * rename.  Past the budget: -ENOMEM. */
int fs_ingest_write(ingest *in, const char *buf, size_t len, uint64_t off, uint64_t owner);
/* Commit what was written since the last commit, whoever closes.
 * Returns 0 when nothing was pending. */
int fs_ingest_commit(ingest *in);
/* A close (FLUSH) by lock owner `owner`, process `pid`: commits when that
 * owner wrote since the last commit.  A file never written, closed by the
 * process that made it: -EINVAL for .npy, which needs a header (the file
 * stays: fs_ingest_release() ends it).  A staged file: nothing. */
int fs_ingest_close(ingest *in, uint64_t owner, uint64_t pid);
/* The last close of a descriptor: what no writer's close committed is
 * committed now (a staged file waits for its rename); a file never written
 * is empty: zero rows, or for .npy an errors line. */
void fs_ingest_release(ingest *in);
/* Commit a staged file (its rename, with renameat2 flags): 0 once
 * committed, -EINVAL (with an errors line, given once) when it is bad,
 * -ENOENT when it is not a staged file being written.  The file is done
 * either way, but a bad one stays after a rename with flags and after the
 * plain rename that comes next: that is how coreutils mv renames (gnulib
 * takes the EINVAL of RENAME_NOREPLACE for "flags not supported" and
 * renames again without), and mv looks at the source after a failure. */
int fs_ingest_rename(ingest *in, int flags);
int fs_ingest_staged(ingest *in);
/* A staged file opened with O_TRUNC (or truncated to 0): it starts over
 * empty.  Other files: nothing. */
void fs_ingest_truncate(ingest *in);
/* Abandon the file (unlinked while open): nothing more is committed. */
void fs_ingest_cancel(ingest *in);
/* Bytes written so far (the file's size). */
uint64_t fs_ingest_size(ingest *in);
/* 1 once the file has committed or failed: it has left ingest/. */
int fs_ingest_done(ingest *in);
int fs_ingest_pending(ingest *in);

#endif
