/*
 * fs/errors.c - the bounded ring of error lines shown in `errors`, oldest
 * first.  Each line is also written to stderr (the daemon's log when it runs
 * in the foreground).
 */
#include "errors.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

#define ERR_LINE_MAX 1024

void errors_init(err_log *log)
{
	memset(log, 0, sizeof *log);
	pthread_mutex_init(&log->mu, NULL);
}

void errors_fini(err_log *log)
{
	for (size_t i = 0; i < ERR_LINES; i++)
		free(log->ring[i]);
	pthread_mutex_destroy(&log->mu);
}

void errlogv(err_log *log, const char *fmt, va_list ap)
{
	char line[ERR_LINE_MAX];
	int n = vsnprintf(line, sizeof line, fmt, ap);
	if (n < 0)
		return;
	size_t len = strlen(line);
	/* one line: no embedded newlines */
	for (size_t i = 0; i < len; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	char *copy = strdup(line);
	if (!copy)
		return;
	pthread_mutex_lock(&log->mu);
	free(log->ring[log->next % ERR_LINES]);
	log->ring[log->next % ERR_LINES] = copy;
	log->next++;
	if (log->count < ERR_LINES)
		log->count++;
	pthread_mutex_unlock(&log->mu);
	fprintf(stderr, "vecfs: %s\n", line);
}

void errlog(err_log *log, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errlogv(log, fmt, ap);
	va_end(ap);
}

char *errors_render(err_log *log, size_t *len)
{
	sbuf b;
	sb_init(&b);
	pthread_mutex_lock(&log->mu);
	for (size_t i = log->next - log->count; i < log->next; i++) {
		sb_adds(&b, log->ring[i % ERR_LINES]);
		sb_add(&b, "\n", 1);
	}
	pthread_mutex_unlock(&log->mu);
	return sb_take(&b, len);
}

size_t errors_count(err_log *log)
{
	pthread_mutex_lock(&log->mu);
	size_t n = log->next;
	pthread_mutex_unlock(&log->mu);
	return n;
}

void errors_last(err_log *log, char *buf, size_t cap)
{
	pthread_mutex_lock(&log->mu);
	const char *l = log->count ? log->ring[(log->next - 1) % ERR_LINES] : "";
	snprintf(buf, cap, "%s", l);
	pthread_mutex_unlock(&log->mu);
}
