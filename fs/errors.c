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

#define ERR_LINES 1000
#define ERR_LINE_MAX 1024

static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char *ring[ERR_LINES];
static size_t ring_next, ring_count;

void errors_init(void)
{
}

void errlogv(const char *fmt, va_list ap)
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
	pthread_mutex_lock(&err_mu);
	free(ring[ring_next]);
	ring[ring_next] = copy;
	ring_next = (ring_next + 1) % ERR_LINES;
	if (ring_count < ERR_LINES)
		ring_count++;
	pthread_mutex_unlock(&err_mu);
	fprintf(stderr, "vecfs: %s\n", line);
}

void errlog(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errlogv(fmt, ap);
	va_end(ap);
}

char *errors_render(size_t *len)
{
	sbuf b;
	sb_init(&b);
	pthread_mutex_lock(&err_mu);
	size_t first = (ring_next + ERR_LINES - ring_count) % ERR_LINES;
	for (size_t i = 0; i < ring_count; i++) {
		const char *l = ring[(first + i) % ERR_LINES];
		sb_adds(&b, l);
		sb_add(&b, "\n", 1);
	}
	pthread_mutex_unlock(&err_mu);
	return sb_take(&b, len);
}
