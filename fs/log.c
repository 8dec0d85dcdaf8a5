/*
 * fs/log.c - the daemon's messages on stderr and in its log file (see
 * log.h).
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fuse_log.h>

static int log_fd = -1;

/* Append "TIME " + text + "\n" to the log file in one write. */
static void append(const char *text)
{
	if (log_fd < 0)
		return;
	char line[2048];
	struct tm tm;
	time_t now = time(NULL);
	gmtime_r(&now, &tm);
	size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%SZ ", &tm);
	int m = snprintf(line + n, sizeof line - n, "%s\n", text);
	if (m < 0)
		return;
	n = (size_t)m + n < sizeof line ? n + (size_t)m : sizeof line - 1;
	line[n - 1] = '\n';
	ssize_t w;
	do
		w = write(log_fd, line, n);
	while (w < 0 && errno == EINTR);
}

static void vlog(const char *prefix, const char *fmt, va_list ap)
{
	char msg[1536];
	size_t p = (size_t)snprintf(msg, sizeof msg, "%s", prefix);
	vsnprintf(msg + p, sizeof msg - p, fmt, ap);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = 0;
	fprintf(stderr, "%s\n", msg);
	append(msg);
}

void fs_log_msg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("vecfs: ", fmt, ap);
	va_end(ap);
}

void fs_log_line(const char *line)
{
	fprintf(stderr, "vecfs: %s\n", line);
	if (log_fd < 0)
		return;
	/* the line has its time already */
	size_t n = strlen(line);
	char buf[2048];
	if (n > sizeof buf - 2)
		n = sizeof buf - 2;
	memcpy(buf, line, n);
	buf[n++] = '\n';
	ssize_t w;
	do
		w = write(log_fd, buf, n);
	while (w < 0 && errno == EINTR);
}

/* libfuse's messages ("fuse: ..."), as they are */
static void fuse_message(enum fuse_log_level level, const char *fmt, va_list ap)
{
	(void)level;
	vlog("", fmt, ap);
}

int fs_log_open(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0)
		return -errno;
	if (log_fd >= 0)
		close(log_fd);
	log_fd = fd;
	fuse_set_log_func(fuse_message);
	return 0;
}
