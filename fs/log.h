/*
 * fs/log.h - the daemon's own messages and its log file (--log FILE).
 *
 * Every message goes to stderr as `vecfs: MESSAGE` (the terminal until the
 * daemon is in the background, /dev/null after) and, once a log file is
 * open, is appended to it as `TIME vecfs: MESSAGE`.  The lines of `errors`
 * go to both as well (`TIME MESSAGE` in the file, as `errors` shows them),
 * and so do libfuse's messages.  Each line is one write() to a file opened
 * with O_APPEND, so lines of concurrent writers never mix and a rotation
 * by truncation (logrotate's copytruncate) is safe.
 */
#ifndef VECFS_FS_LOG_H
#define VECFS_FS_LOG_H

/* Open FILE for appending (created 0640 if missing) and route libfuse's
 * messages through fs_log_msg(): 0 or -errno.  Call before threads start. */
int fs_log_open(const char *path);

/* `vecfs: MESSAGE` on stderr, `TIME vecfs: MESSAGE` in the log file. */
void fs_log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* An `errors` line, already `TIME MESSAGE`: `vecfs: LINE` on stderr,
 * LINE in the log file. */
void fs_log_line(const char *line);

#endif
