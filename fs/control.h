/*
 * fs/control.h - the `ctl` commands and the `backup` stream.
 */
#ifndef VECFS_FS_CONTROL_H
#define VECFS_FS_CONTROL_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#include "sbuf.h"

typedef struct fs_daemon fs_daemon;

#define CTL_COMMANDS 6

/* The last run of one ctl command since the mount. */
typedef struct ctl_last {
	int running;     /* runs under way */
	int ran;         /* one has ended */
	int rc;          /* how the last one ended */
	time_t when;     /* and when */
} ctl_last;

/* How a build started through ctl goes, and how each command last ran
 * (mu guards both). */
typedef struct build_state {
	pthread_mutex_t mu;
	int running;     /* builds running */
	char phase[32];  /* of the latest one */
	int pct;
	ctl_last last[CTL_COMMANDS];
} build_state;

void fs_control_init(fs_daemon *dm);
void fs_control_fini(fs_daemon *dm);
/* The store is open (dm->store): records that a build, automatic or not,
 * leaves out for failing their checksum get an errors line each. */
void fs_control_store_opened(fs_daemon *dm);
/* Run one ctl command line; 0 or -errno (with an errors line). */
int fs_ctl_exec(fs_daemon *dm, const char *line, size_t n);
/* What reading ctl shows: the commands, and how each one last ran. */
int fs_ctl_render(fs_daemon *dm, sbuf *b);
/* A file descriptor holding a fresh backup (export.jsonl), positioned at
 * 0; or -errno with an errors line. */
int fs_backup_open(fs_daemon *dm);
int fs_export_open(fs_daemon *dm);
/* Live progress of a build started through ctl: 1 if one is running. */
int fs_build_progress(fs_daemon *dm, char *phase, size_t cap, int *pct);

#endif
