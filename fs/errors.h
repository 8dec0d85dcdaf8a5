/*
 * fs/errors.h - the lines shown in `errors`, oldest first: a log file.
 *
 * Lines are appended, so a reader that holds its offset sees each new one
 * (`tail -f`); past ERR_KEEP lines the oldest are dropped down to the last
 * ERR_LINES at once, so the file shrinks from the front as after a log
 * rotation.  Attached to a store (fs_errors_attach()), the lines are also in
 * the file STORE/errors, appended as they come and rewritten (a new file
 * renamed over it) when old lines drop: the log survives remounts.
 *
 * Each line starts with its UTC time (`2026-12-03T22:41:07Z `); control
 * characters in a message are escaped, so a name cannot forge or garble
 * lines.  Repeats are rate-limited: past ERR_BURST lines of one message
 * (the same failure, format and words: the same file, the same line or
 * row, the same reason) within ERR_WINDOW_S seconds, further ones are
 * counted, and one line `MESSAGE ... and N more like it` stands for them,
 * so a flood of one failure keeps the other lines in the ring.  Messages
 * that differ in anything (another file, line or reason) are never held
 * back for each other, and a failure of resources (ENOSPC, EDQUOT, ENOMEM,
 * EIO) is never held back at all.
 */
#ifndef VECFS_FS_ERRORS_H
#define VECFS_FS_ERRORS_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define ERR_LINES 1000      /* lines kept at least */
#define ERR_KEEP 2000       /* lines kept at most */
#define ERR_BURST 10      /* lines of one message shown per window */
#define ERR_WINDOW_S 60
#define ERR_KINDS 32      /* messages followed at once */
#define ERR_MSG_MAX 1024  /* one message, escaped */

/* One message being rate-limited. */
typedef struct err_kind {
	unsigned long key;    /* 0: unused */
	time_t start;         /* of its window */
	unsigned shown;       /* lines in the ring this window */
	unsigned long held;   /* lines held back since the last summary */
	char last[ERR_MSG_MAX]; /* the last one held back */
} err_kind;

typedef struct err_log {
	pthread_mutex_t mu;
	char *text;           /* the lines, each ending in a newline */
	size_t len, cap;
	size_t lines;         /* in text */
	int fd;               /* STORE/errors, or -1 */
	char *path;           /* its name */
	uint64_t changed_ns;  /* when text last changed (ns since the epoch) */
	size_t messages;      /* logged, held back ones included */
	char last[ERR_MSG_MAX]; /* the latest message */
	err_kind kinds[ERR_KINDS];
	time_t (*clock)(time_t *); /* time(); tests may set another */
} err_log;

void fs_errors_init(err_log *log);
void fs_errors_fini(err_log *log);
/* Keep the log in dir/errors: its lines so far are read (the last ERR_KEEP
 * of them), and the ones logged before this call are appended to them.
 * 0, or -errno (the log then stays in memory only). */
int fs_errors_attach(err_log *log, const char *dir);
/* Append one line to `errors` (also written to stderr). */
void fs_errlog(err_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fs_errlogv(err_log *log, const char *fmt, va_list ap);
/* The same for a failure that returns errno err (negative or positive):
 * failures of different errnos are never alike, and one of resources is
 * never held back. */
void fs_errlog_err(err_log *log, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The lines, each ending in a newline (malloc'd; *len set); NULL without
 * memory.  Repeats held back so far are summed up first (as in the two
 * below). */
char *fs_errors_render(err_log *log, size_t *len);
/* Up to cap bytes of the text from offset off into buf: how many. */
size_t fs_errors_read(err_log *log, uint64_t off, char *buf, size_t cap);
/* The text's length now, and when it last changed (ns since the epoch;
 * 0: never). */
uint64_t fs_errors_size(err_log *log, uint64_t *changed_ns);
/* Messages logged since the start, held back ones included. */
size_t fs_errors_count(err_log *log);
/* The latest message without its time stamp ("" when none; also one held
 * back), cut to cap. */
void fs_errors_last(err_log *log, char *buf, size_t cap);

#endif
