/*
 * fs/daemon.h - what the daemon serves.
 *
 * The daemon maps the vecfs tree (README, config, stats, errors, ctl,
 * backup, ingest/, records/, query/, generations/) onto the library in
 * vecfs.h.  It holds no index logic: it parses what users write, calls the
 * library, and formats what the library returns.
 */
#ifndef VECFS_FS_DAEMON_H
#define VECFS_FS_DAEMON_H

#include "query.h"
#include "vecfs.h"

typedef struct fs_mount fs_mount;

#define SESSIONS_DEFAULT 1024     /* -o max_sessions */
#define QUERY_INPUT_MB_DEFAULT 1024 /* -o query_input_mb */

/* What the adapter serves.  main.c owns the one instance and hands it to
 * the parts that need more than the store. */
struct fs_mount {
	vecfs *store;
	const char *store_dir;  /* absolute path of STORE: temporary files of
				 * backups and ingests go there */
	volatile int stopping;  /* set once the daemon shuts down: running
				 * builds stop */
	unsigned max_sessions;  /* query sessions open at once */
	qbudget query_input;    /* what the sessions' `in` may hold */
};

#endif
