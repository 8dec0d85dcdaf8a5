/*
 * fs/fs.h - declarations shared by the files of the FUSE adapter.
 *
 * The adapter maps the vecfs tree (README, config, stats, errors, ctl,
 * backup, ingest/, records/, query/, generations/) onto the library in
 * vecfs.h.  It holds no index logic: it parses what users write, calls the
 * library, and formats what the library returns.
 */
#ifndef VECFS_FS_H
#define VECFS_FS_H

#define FUSE_USE_VERSION 35

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"
#include "number.h"

/* Bytes that the query inputs of all sessions may hold together. */
typedef struct qbudget {
	pthread_mutex_t mu;
	size_t max, used;
} qbudget;

#define SESSIONS_DEFAULT 1024     /* -o max_sessions */
#define QUERY_INPUT_MB_DEFAULT 1024 /* -o query_input_mb */

/* What the adapter serves.  main.c owns the one instance and hands it to
 * the parts that need more than the store. */
typedef struct fs_mount {
	vecfs *store;
	const char *store_dir;  /* absolute path of STORE: temporary files of
				 * backups and ingests go there */
	volatile int stopping;  /* set once the daemon shuts down: running
				 * builds stop */
	unsigned max_sessions;  /* query sessions open at once */
	qbudget query_input;    /* what the sessions' `in` may hold */
} fs_mount;

/* ---------------------------------------------------------------- text.c */

/* A growing byte buffer.  On allocation failure `oom` is set and further
 * appends are dropped. */
typedef struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
} sbuf;

void sb_init(sbuf *b);
void sb_free(sbuf *b);
void sb_reset(sbuf *b);
int sb_reserve(sbuf *b, size_t extra);
void sb_add(sbuf *b, const void *data, size_t n);
void sb_adds(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the contents over (NUL-terminated) and leave the buffer empty. */
char *sb_take(sbuf *b, size_t *len);

/* Append a JSON string literal. */
void sb_json_string(sbuf *b, const char *s, size_t n);

void render_readme(sbuf *b);
int render_config(vecfs *v, sbuf *b);
int render_stats(vecfs *v, sbuf *b);
/* One `key = value` line into c (syntax only); -EINVAL with an errors line. */
int config_line(const char *s, size_t n, unsigned line, vecfs_config *c);
/* Apply `key = value` lines to the configuration, all or nothing. */
int config_apply_text(vecfs *v, const char *text, size_t len);

/* ---------------------------------------------------------------- loop.c */

/* Serve the session with worker threads, one pinned to each CPU (and more,
 * up to max_threads, while all are busy), until it ends.  0 or -errno. */
int fs_loop(struct fuse_session *se, unsigned max_threads);
/* Make fs_loop() return once the requests being handled are answered. */
void fs_loop_stop(void);
/* A reply is about to go out from the calling thread: a worker of the loop
 * counts as waiting from now on (a no-op on other threads). */
void fs_loop_replied(void);
/* The calling worker's request has work that may take long or wait on the
 * kernel: another worker is to listen meanwhile.  Requests begin so, but
 * releases and forgets; the work a release may have (a commit, a query, a
 * config or ctl write: flush_handle()) calls this. */
void fs_loop_long(void);
/* How the session loop stands (see fs/loop.c). */
typedef struct fs_loop_stats {
	unsigned workers;        /* running now */
	uint64_t extra_started;  /* extra workers started since the loop began */
	unsigned listening;      /* workers the device wakes for their own sake
				  * (not as a standby) */
	char listening_cpus[64]; /* their CPUs, "0,1"; "*" for one not pinned */
} fs_loop_stats;
/* Returns 0 (and nothing is set) unless fs_loop() serves the session. */
int fs_loop_counts(fs_loop_stats *st);

/* ---------------------------------------------------------------- errors.c */

/* Append one line to `errors` (also written to stderr). */
void errlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void errlogv(const char *fmt, va_list ap);
char *errors_render(size_t *len);
void errors_init(void);

/* ---------------------------------------------------------------- ingest.c */

typedef struct ingest ingest;

/* The format for a file name, or -1 when its ending is not one vecfs reads. */
int ingest_format_of(const char *name);
ingest *ingest_new(fs_mount *m, const char *name, int format);
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

/* ---------------------------------------------------------------- query.c */

typedef struct qsession qsession;

enum { QS_OUT, QS_JSON, QS_STATS };

/* budget: shared by all sessions; each one's input counts against it. */
qsession *qs_new(vecfs *v, const char *id, qbudget *budget);
void qs_free(qsession *q);
void qs_in_truncate(qsession *q);
/* Forget the input and the results (rm of a session's files). */
void qs_clear(qsession *q);
/* The session was removed: forget input and results, refuse more input. */
void qs_end(qsession *q);
/* A write at offset 0 replaces the input; others append to it. */
int qs_in_write(qsession *q, const char *buf, size_t len, uint64_t off);
size_t qs_in_size(qsession *q);
/* Run the query when `in` was written since the last run; *ran says
 * whether it did (and so replaced or cleared the results). */
int qs_in_flush(qsession *q, int *ran);
/* A snapshot of out / out.json / stats (malloc'd; *len set). */
char *qs_render(qsession *q, int which, size_t *len);
size_t qs_size(qsession *q, int which);

/* ---------------------------------------------------------------- ahead.c */

/* Search the complete input (vecs: nq x dim, owned from here on) of
 * version `ver` of session `serial` now, on a thread of its own, unless
 * that thread is busy. */
void ahead_submit(uint64_t serial, uint64_t ver, vecfs *v, const vecfs_query_opts *o,
		  float *vecs, size_t nq, uint32_t dim);
/* The results searched ahead for version `ver` of session `serial`, once
 * done, if they hold for the store as it is now (then counted in its
 * stats); else NULL. */
vecfs_results *ahead_take(uint64_t serial, uint64_t ver, vecfs *v);
/* Closes answered by a search ahead, since the start. */
uint64_t ahead_taken(void);
/* End the thread (before the store closes). */
void ahead_stop(void);

/* ---------------------------------------------------------------- control.c */

/* Run one ctl command line; 0 or -errno (with an errors line). */
int ctl_exec(fs_mount *m, const char *line, size_t n);
/* A file descriptor holding a fresh backup, positioned at 0; or -errno. */
int backup_open(fs_mount *m);
/* Live progress of a build started through ctl: 1 if one is running. */
int build_progress(char *phase, size_t cap, int *pct);

/* ---------------------------------------------------------------- generations.c */

enum { GF_META, GF_CENTROIDS, GF_CLUSTERS, GF_PROGRESS };

int gen_exists(vecfs *v, uint64_t gen);
int gen_render(vecfs *v, uint64_t gen, int which, sbuf *b);
int64_t gen_file_size(vecfs *v, uint64_t gen, int which);
/* Generation id named by a symlink target ("7", "./7", ".../generations/7"). */
int gen_parse_target(const char *target, uint64_t *gen);
int gen_parse_name(const char *name, uint64_t *gen);
/* Make the generation named by a symlink target active (errors line on failure). */
int gen_activate_target(vecfs *v, const char *target, const char *how);

/* ---------------------------------------------------------------- passthrough.c */

/* Route the session's device I/O through passthrough.c: replies tell the
 * loop (fs_loop_replied()), and with `passthrough` the INIT reply asks for
 * passthrough when the kernel offers it.  After fuse_session_mount(),
 * before the loop.  0 or -errno. */
int pt_install(struct fuse_session *se, int passthrough);
/* 1 while registering backing files may work. */
int pt_usable(void);
/* Register fd (a regular file) as a backing file: its id (> 0), or -errno
 * when passthrough is not available. */
int pt_backing_open(int fd);
void pt_backing_close(int id);
/* The session's device is going away: backing files go with it. */
void pt_detach(void);
/* Answer OPEN like fuse_reply_open(), with reads and writes passed through
 * to the backing file `backing_id`. */
int pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

/* ---------------------------------------------------------------- tree.c */

extern const struct fuse_lowlevel_ops fs_ops;
void tree_init(fs_mount *m);
/* The session, for notifications; cache_out: serve query/ID/out from the
 * kernel's page cache (needs a multithreaded loop: a notification may wait
 * for a read of out that another thread answers); passthrough: from a file
 * of the daemon's that the kernel reads (passthrough.c), when it can. */
void tree_set_session(struct fuse_session *se, int cache_out, int passthrough);
void tree_destroy(void);

#endif
