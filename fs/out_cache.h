/*
 * fs/out_cache.h - where a query session's out is read from: a file of
 * the daemon's that the kernel reads (passthrough), or the kernel's page
 * cache, kept up to date at each query.
 */
#ifndef VECFS_FS_OUT_CACHE_H
#define VECFS_FS_OUT_CACHE_H

#include <pthread.h>

#include "fuse_compat.h"

typedef struct fs_daemon fs_daemon;
struct node;

/* dm->out */
typedef struct out_cache {
	struct fuse_session *se;   /* for notifications */
	int cache_wanted, cached;  /* see fs_push_out() */
	int passthrough;           /* see fs_out_backing_open() */
	unsigned files, files_max; /* sessions with a backing file */
	pthread_mutex_t push_mu;   /* one push at a time */
} out_cache;

void fs_out_cache_init(fs_daemon *dm);
void fs_out_cache_fini(fs_daemon *dm);
/* The session, for notifications; cache_out: serve query/ID/out from the
 * kernel's page cache (needs a multithreaded loop: a notification may wait
 * for a read of out that another thread answers); passthrough: from a file
 * of the daemon's that the kernel reads (passthrough.c), when it can. */
void fs_out_cache_set_session(fs_daemon *dm, struct fuse_session *se, int cache_out,
			   int passthrough);
/* At INIT: ask the kernel for what caching out needs, if it offers it. */
void fs_out_cache_negotiate(fs_daemon *dm, struct fuse_conn_info *conn);
/* Give a new session a backing file for out when passthrough works. */
void fs_out_backing_open(fs_daemon *dm, struct node *session);
/* With dm->tree.mu held: the session no longer needs its backing file. */
void fs_out_backing_close(fs_daemon *dm, struct node *session);
/* out of the session changed: make readers see the new one. */
int fs_push_out(fs_daemon *dm, struct node *session);
/* n is an out served from a file of the daemon's (passthrough). */
int fs_out_passthrough(const struct node *n);
/* n is an out served from the kernel's page cache. */
int fs_out_cached(fs_daemon *dm, const struct node *n);

#endif
