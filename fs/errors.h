/*
 * fs/errors.h - the lines shown in `errors`.
 */
#ifndef VECFS_FS_ERRORS_H
#define VECFS_FS_ERRORS_H

#include <stdarg.h>
#include <stddef.h>

/* Append one line to `errors` (also written to stderr). */
void errlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void errlogv(const char *fmt, va_list ap);
char *errors_render(size_t *len);
void errors_init(void);

#endif
