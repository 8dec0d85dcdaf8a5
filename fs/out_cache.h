/*
 * fs/out_cache.h - where a query session's out is read from: a file of
 * the daemon's that the kernel reads (passthrough), or the kernel's page
 * cache, kept up to date at each query.
 */
#ifndef VECFS_FS_OUT_CACHE_H
#define VECFS_FS_OUT_CACHE_H

#include "fuse_compat.h"

struct node;

/* The session, for notifications; cache_out: serve query/ID/out from the
 * kernel's page cache (needs a multithreaded loop: a notification may wait
 * for a read of out that another thread answers); passthrough: from a file
 * of the daemon's that the kernel reads (passthrough.c), when it can. */
void tree_set_session(struct fuse_session *se, int cache_out, int passthrough);
/* At INIT: ask the kernel for what caching out needs, if it offers it. */
void out_cache_negotiate(struct fuse_conn_info *conn);
/* Give a new session a backing file for out when passthrough works. */
void out_backing_open(struct node *session);
/* With tree_mu held: the session no longer needs its backing file. */
void out_backing_close(struct node *session);
/* out of the session changed: make readers see the new one. */
int push_out(struct node *session);
/* n is an out served from a file of the daemon's (passthrough). */
int out_passthrough(const struct node *n);
/* n is an out served from the kernel's page cache. */
int out_cached(const struct node *n);

#endif
