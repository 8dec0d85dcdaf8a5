/*
 * fs/errors.c - the bounded ring of error lines shown in `errors`, oldest
 * first: time-stamped, escaped, repeats rate-limited (see errors.h).  Each
 * line is also written to stderr (when the daemon runs in the foreground)
 * and to the log file (log.h).
 */
#include "errors.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sbuf.h"

void errors_init(err_log *log)
{
	memset(log, 0, sizeof *log);
	pthread_mutex_init(&log->mu, NULL);
	log->clock = time;
}

void errors_fini(err_log *log)
{
	for (size_t i = 0; i < ERR_LINES; i++)
		free(log->ring[i]);
	pthread_mutex_destroy(&log->mu);
}

/* src as one line: control characters as \n, \r, \t or \xHH; cut to cap. */
static void escape(char *dst, size_t cap, const char *src)
{
	size_t o = 0;
	for (const unsigned char *s = (const unsigned char *)src; *s; s++) {
		char e[5];
		if (*s >= 0x20 && *s != 0x7f) {
			e[0] = (char)*s;
			e[1] = 0;
		} else if (*s == '\n' || *s == '\r' || *s == '\t') {
			e[0] = '\\';
			e[1] = *s == '\n' ? 'n' : *s == '\r' ? 'r' : 't';
			e[2] = 0;
		} else {
			snprintf(e, sizeof e, "\\x%02x", *s);
		}
		size_t el = strlen(e);
		if (o + el >= cap)
			break;
		memcpy(dst + o, e, el);
		o += el;
	}
	dst[o] = 0;
}

/* Messages alike: the same failure (errno), the same format and the same
 * words, so the same file; a line number, a name or a reason that differs
 * makes another message. */
static unsigned long kind_key(int err, const char *fmt, const char *msg)
{
	unsigned long h = 1469598103934665603UL;
	h = (h ^ (unsigned long)(err < 0 ? -err : err)) * 1099511628211UL;
	for (const char *p = fmt; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211UL;
	h = (h ^ 0xff) * 1099511628211UL;
	for (const char *p = msg; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211UL;
	return h ? h : 1;
}

/* A failure of resources, never held back: each one matters, and they
 * come seldom. */
static int resource_failure(int err)
{
	err = err < 0 ? -err : err;
	return err == ENOSPC || err == EDQUOT || err == ENOMEM || err == EIO;
}

/* Put "TIME msg" into the ring, on stderr and in the log file (log->mu
 * held). */
static void push_line(err_log *log, time_t now, const char *msg)
{
	struct tm tm;
	char ts[32];
	gmtime_r(&now, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ ", &tm);
	size_t tl = strlen(ts), ml = strlen(msg);
	char *line = malloc(tl + ml + 1);
	if (!line)
		return;
	memcpy(line, ts, tl);
	memcpy(line + tl, msg, ml + 1);
	free(log->ring[log->next % ERR_LINES]);
	log->ring[log->next % ERR_LINES] = line;
	log->next++;
	if (log->count < ERR_LINES)
		log->count++;
	log_line(line);
}

/* The line that stands for k's held-back repeats (log->mu held). */
static void summarize(err_log *log, err_kind *k, time_t now)
{
	if (!k->held)
		return;
	char n[32], grouped[48], msg[ERR_MSG_MAX + 80];
	int nl = snprintf(n, sizeof n, "%lu", k->held);
	size_t o = 0;
	for (int i = 0; i < nl; i++) {
		if (i && (nl - i) % 3 == 0)
			grouped[o++] = ',';
		grouped[o++] = n[i];
	}
	grouped[o] = 0;
	snprintf(msg, sizeof msg, "%s ... and %s more like it", k->last, grouped);
	k->held = 0;
	push_line(log, now, msg);
}

static void errlog_msg(err_log *log, int err, const char *fmt, va_list ap)
{
	char raw[ERR_MSG_MAX], msg[ERR_MSG_MAX];
	if (vsnprintf(raw, sizeof raw, fmt, ap) < 0)
		return;
	escape(msg, sizeof msg, raw);
	unsigned long key = kind_key(err, fmt, msg);
	pthread_mutex_lock(&log->mu);
	time_t now = log->clock(NULL);
	log->messages++;
	memcpy(log->last, msg, sizeof msg);
	err_kind *k = NULL, *oldest = &log->kinds[0];
	for (int i = 0; i < ERR_KINDS; i++) {
		err_kind *c = &log->kinds[i];
		if (c->key == key)
			k = c;
		else if (c->key && now - c->start >= ERR_WINDOW_S)
			summarize(log, c, now); /* a window ended */
		if (!c->key || (oldest->key && c->start < oldest->start))
			oldest = c;
	}
	if (resource_failure(err)) {
		push_line(log, now, msg);
		pthread_mutex_unlock(&log->mu);
		return;
	}
	if (!k) {
		k = oldest;
		summarize(log, k, now);
		k->key = key;
		k->start = now;
		k->shown = 0;
	} else if (now - k->start >= ERR_WINDOW_S) {
		summarize(log, k, now);
		k->start = now;
		k->shown = 0;
	}
	if (k->shown < ERR_BURST) {
		k->shown++;
		push_line(log, now, msg);
	} else {
		k->held++;
		memcpy(k->last, msg, sizeof msg);
	}
	pthread_mutex_unlock(&log->mu);
}

void errlogv(err_log *log, const char *fmt, va_list ap)
{
	errlog_msg(log, 0, fmt, ap);
}

void errlog(err_log *log, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errlog_msg(log, 0, fmt, ap);
	va_end(ap);
}

void errlog_err(err_log *log, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errlog_msg(log, err, fmt, ap);
	va_end(ap);
}

char *errors_render(err_log *log, size_t *len)
{
	sbuf b;
	sb_init(&b);
	pthread_mutex_lock(&log->mu);
	time_t now = log->clock(NULL);
	for (int i = 0; i < ERR_KINDS; i++)
		summarize(log, &log->kinds[i], now);
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
	size_t n = log->messages;
	pthread_mutex_unlock(&log->mu);
	return n;
}

void errors_last(err_log *log, char *buf, size_t cap)
{
	pthread_mutex_lock(&log->mu);
	snprintf(buf, cap, "%s", log->last);
	pthread_mutex_unlock(&log->mu);
}
