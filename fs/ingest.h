/*
 * fs/ingest.h - files written into ingest/.
 */
#ifndef VECFS_FS_INGEST_H
#define VECFS_FS_INGEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct fs_daemon fs_daemon;
typedef struct ingest ingest;

/* The format for a file name, or -1 when its ending is not one vecfs reads. */
int ingest_format_of(const char *name);
ingest *ingest_new(fs_daemon *dm, const char *name, int format);
void ingest_free(ingest *in);
/* Parse bytes written to the file.  Rows are validated as they complete; a
 * bad row fails with -EINVAL (and an errors line), after which the file is
 * dead: nothing of it is committed. */
int ingest_write(ingest *in, const char *buf, size_t len);
/* Commit what was written since the last commit (a flush after data).
 * Returns 0 when nothing was pending. */
int ingest_commit(ingest *in);
/* Abandon the file (unlinked while open): nothing more is committed. */
void ingest_cancel(ingest *in);
/* Bytes written so far (the file's size). */
uint64_t ingest_size(ingest *in);
/* 1 once the file has committed or failed: it has left ingest/. */
int ingest_done(ingest *in);
int ingest_pending(ingest *in);

#endif
