/*
 * fs/query.h - query sessions (query/ID/).
 */
#ifndef VECFS_FS_QUERY_H
#define VECFS_FS_QUERY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbuf.h"
#include "vecfs.h"

/* Bytes that the query inputs of all sessions may hold together. */
typedef struct qbudget {
	pthread_mutex_t mu;
	size_t max, used;
} qbudget;

typedef struct fs_daemon fs_daemon;
typedef struct qsession qsession;

enum { QS_OUT, QS_JSON, QS_STATS };

/* Whether process pid holds a descriptor open on the file of inode ino of
 * the mount whose device is dev (MAJ:MIN; "" to match the inode alone),
 * by what /proc says of its descriptors (fdinfo: the mount id and the
 * inode), so any path to the file counts: a bind mount's, a container's.
 * Reading /proc asks nothing of the mount. */
int fs_proc_holds_file(pid_t pid, const char *dev, uint64_t ino);

/* A session of dm's store; its input counts against dm->query_input. */
qsession *fs_qs_new(fs_daemon *dm, const char *id);
void fs_qs_free(qsession *q);
void fs_qs_in_truncate(qsession *q);
/* Forget the input and the results (rm of a session's files). */
void fs_qs_clear(qsession *q);
/* The session was removed: forget input and results, refuse more input. */
void fs_qs_end(qsession *q);
/* A write at offset 0 replaces the input; others append to it. */
int fs_qs_in_write(qsession *q, const char *buf, size_t len, uint64_t off);
/* A whole input written at offset 0 and run at once (a synchronous write:
 * see ops_file.c): the input's errno, as its close would return it; *ran
 * as for fs_qs_in_flush(). */
int fs_qs_in_write_run(qsession *q, const char *buf, size_t len, int *ran);
size_t fs_qs_in_size(qsession *q);
/* What in holds, as a read of it returns it. */
int fs_qs_in_render(qsession *q, sbuf *b);
/* Run the query when `in` was written since the last run; *ran says
 * whether it did (and so replaced or cleared the results). */
int fs_qs_in_flush(qsession *q, int *ran);
/* The close of a descriptor of `in` that wrote nothing, and the last one
 * its process holds: an input left empty (by O_TRUNC or a truncate) runs,
 * and fails as one with no query vector. */
int fs_qs_in_flush_empty(qsession *q, int *ran);
/* One whole input in[0..len) run at once and its results, as out would
 * show them, appended to `out` (the ioctl of in): 0, or -errno with an
 * errors line (but -ERANGE, none: they are longer than room bytes).  Nothing of the
 * session changes; calls may run at once, also beside its in and out. */
int fs_qs_call(qsession *q, const char *in, size_t len, sbuf *out, size_t room);
/* A snapshot of out / out.json / stats (malloc'd; *len set). */
char *fs_qs_render(qsession *q, int which, size_t *len);
/* The same, appended to b: 0, -ENOMEM, or -E2BIG (with an errors line)
 * when the rendered file would pass dm's query_output. */
struct sbuf;
int fs_qs_render_into(qsession *q, int which, struct sbuf *b);
size_t fs_qs_size(qsession *q, int which);

#endif
