/*
 * fs/errors.c - the bounded ring of error lines shown in `errors`, oldest
 * first: time-stamped, escaped, repeats rate-limited (see errors.h).  Each
 * line is also written to stderr (when the daemon runs in the foreground)
 * and to the log file (log.h).
 */
#include "errors.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "sbuf.h"

void fs_errors_init(err_log *log)
{
	memset(log, 0, sizeof *log);
	pthread_mutex_init(&log->mu, NULL);
	log->clock = time;
	log->fd = -1;
}

void fs_errors_fini(err_log *log)
{
	if (log->fd >= 0)
		close(log->fd);
	free(log->text);
	free(log->path);
	pthread_mutex_destroy(&log->mu);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Room for n more bytes of text: 0 or -ENOMEM. */
static int text_room(err_log *log, size_t n)
{
	if (log->len + n <= log->cap)
		return 0;
	size_t cap = log->cap ? log->cap : 4096;
	while (cap < log->len + n)
		cap *= 2;
	char *t = realloc(log->text, cap);
	if (!t)
		return -ENOMEM;
	log->text = t;
	log->cap = cap;
	return 0;
}

/* The text as the file holds it: written whole to a new file renamed over
 * the old one (log->mu held, or before any thread). */
static void file_rewrite(err_log *log)
{
	if (!log->path)
		return;
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.new", log->path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	size_t o = 0;
	while (o < log->len) {
		ssize_t w = write(fd, log->text + o, log->len - o);
		if (w <= 0 && errno != EINTR)
			break;
		if (w > 0)
			o += (size_t)w;
	}
	if (o < log->len || fdatasync(fd) || rename(tmp, log->path)) {
		close(fd);
		unlink(tmp);
		return;
	}
	close(fd);
	int nfd = open(log->path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (nfd >= 0) {
		if (log->fd >= 0)
			close(log->fd);
		log->fd = nfd;
	}
}

/* Past ERR_KEEP lines, keep the last ERR_LINES (log->mu held). */
static void drop_old(err_log *log)
{
	if (log->lines <= ERR_KEEP)
		return;
	size_t drop = log->lines - ERR_LINES, at = 0;
	for (size_t i = 0; i < drop; i++) {
		const char *nl = memchr(log->text + at, '\n', log->len - at);
		at = nl ? (size_t)(nl - log->text) + 1 : log->len;
	}
	memmove(log->text, log->text + at, log->len - at);
	log->len -= at;
	log->lines -= drop;
	file_rewrite(log);
}

int fs_errors_attach(err_log *log, const char *dir)
{
	char *path = NULL;
	if (asprintf(&path, "%s/errors", dir) < 0)
		return -ENOMEM;
	int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		free(path);
		return -e;
	}
	struct stat st;
	char *old = NULL;
	size_t n = 0;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && (old = malloc((size_t)st.st_size))) {
		ssize_t r = pread(fd, old, (size_t)st.st_size, 0);
		n = r > 0 ? (size_t)r : 0;
		while (n && old[n - 1] != '\n')
			n--; /* a line cut short by a crash */
	}
	pthread_mutex_lock(&log->mu);
	/* the lines of the file, then those logged before it was attached */
	if (n && text_room(log, n) == 0) {
		if (log->len)
			memmove(log->text + n, log->text, log->len);
		memcpy(log->text, old, n);
		log->len += n;
		for (size_t i = 0; i < n; i++)
			log->lines += old[i] == '\n';
	}
	log->path = path;
	log->fd = fd;
	if (n)
		log->changed_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
	if (log->len != n || (off_t)n != st.st_size) /* lines of its own, or a cut line */
		file_rewrite(log);
	drop_old(log);
	pthread_mutex_unlock(&log->mu);
	free(old);
	return 0;
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
	if (text_room(log, tl + ml + 1))
		return;
	char *line = log->text + log->len;
	memcpy(line, ts, tl);
	memcpy(line + tl, msg, ml);
	line[tl + ml] = '\n';
	log->len += tl + ml + 1;
	log->lines++;
	log->changed_ns = now_ns();
	if (log->fd >= 0) { /* on a full disk the line is in memory still */
		ssize_t w = write(log->fd, line, tl + ml + 1);
		(void)w;
	}
	line[tl + ml] = 0; /* as one string for the log file, then a line again */
	fs_log_line(line);
	line[tl + ml] = '\n';
	drop_old(log);
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

void fs_errlogv(err_log *log, const char *fmt, va_list ap)
{
	errlog_msg(log, 0, fmt, ap);
}

void fs_errlog(err_log *log, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errlog_msg(log, 0, fmt, ap);
	va_end(ap);
}

void fs_errlog_err(err_log *log, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errlog_msg(log, err, fmt, ap);
	va_end(ap);
}

/* Sum up the repeats held back so far (log->mu held). */
static void summarize_all(err_log *log)
{
	time_t now = log->clock(NULL);
	for (int i = 0; i < ERR_KINDS; i++)
		summarize(log, &log->kinds[i], now);
}

char *fs_errors_render(err_log *log, size_t *len)
{
	pthread_mutex_lock(&log->mu);
	summarize_all(log);
	char *p = malloc(log->len + 1);
	if (p) {
		memcpy(p, log->text ? log->text : "", log->len);
		p[log->len] = 0;
		*len = log->len;
	}
	pthread_mutex_unlock(&log->mu);
	return p;
}

size_t fs_errors_read(err_log *log, uint64_t off, char *buf, size_t cap)
{
	size_t n = 0;
	pthread_mutex_lock(&log->mu);
	summarize_all(log);
	if (off < log->len) {
		n = log->len - (size_t)off < cap ? log->len - (size_t)off : cap;
		memcpy(buf, log->text + off, n);
	}
	pthread_mutex_unlock(&log->mu);
	return n;
}

uint64_t fs_errors_size(err_log *log, uint64_t *changed_ns)
{
	pthread_mutex_lock(&log->mu);
	summarize_all(log);
	uint64_t n = log->len;
	if (changed_ns)
		*changed_ns = log->changed_ns;
	pthread_mutex_unlock(&log->mu);
	return n;
}

size_t fs_errors_count(err_log *log)
{
	pthread_mutex_lock(&log->mu);
	size_t n = log->messages;
	pthread_mutex_unlock(&log->mu);
	return n;
}

void fs_errors_last(err_log *log, char *buf, size_t cap)
{
	pthread_mutex_lock(&log->mu);
	snprintf(buf, cap, "%s", log->last);
	pthread_mutex_unlock(&log->mu);
}
