/*
 * fs/errors.h - the bounded ring of lines shown in `errors`, oldest first.
 */
#ifndef VECFS_FS_ERRORS_H
#define VECFS_FS_ERRORS_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>

#define ERR_LINES 1000

typedef struct err_log {
	pthread_mutex_t mu;
	char *ring[ERR_LINES];
	size_t next, count;
} err_log;

void errors_init(err_log *log);
void errors_fini(err_log *log);
/* Append one line to `errors` (also written to stderr). */
void errlog(err_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void errlogv(err_log *log, const char *fmt, va_list ap);
/* The lines, each ending in a newline (malloc'd; *len set); NULL without
 * memory. */
char *errors_render(err_log *log, size_t *len);
/* Lines appended since the start. */
size_t errors_count(err_log *log);
/* The latest line ("" when none), cut to cap. */
void errors_last(err_log *log, char *buf, size_t cap);

#endif
