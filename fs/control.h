/*
 * fs/control.h - the `ctl` commands and the `backup` stream.
 */
#ifndef VECFS_FS_CONTROL_H
#define VECFS_FS_CONTROL_H

#include <stddef.h>

typedef struct fs_mount fs_mount;

/* Run one ctl command line; 0 or -errno (with an errors line). */
int ctl_exec(fs_mount *m, const char *line, size_t n);
/* A file descriptor holding a fresh backup, positioned at 0; or -errno. */
int backup_open(fs_mount *m);
/* Live progress of a build started through ctl: 1 if one is running. */
int build_progress(char *phase, size_t cap, int *pct);

#endif
