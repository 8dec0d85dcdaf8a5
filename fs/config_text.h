/*
 * fs/config_text.h - the `key = value` lines written to `config`.
 */
#ifndef VECFS_FS_CONFIG_TEXT_H
#define VECFS_FS_CONFIG_TEXT_H

#include <stddef.h>

#include "errors.h"
#include "vecfs.h"

/* One `key = value` line into c (syntax only); -EINVAL with an errors line. */
int fs_config_line(err_log *log, const char *s, size_t n, unsigned line, vecfs_config *c);
/* Apply `key = value` lines to the configuration, all or nothing. */
int fs_config_apply_text(vecfs *v, err_log *log, const char *text, size_t len);

#endif
