/*
 * fs/ahead.h - searching a query ahead of the close that runs it.
 */
#ifndef VECFS_FS_AHEAD_H
#define VECFS_FS_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"

typedef struct fs_daemon fs_daemon;
typedef struct ahead ahead;

/* dm->ahead: 0 or -ENOMEM.  Its thread starts with the first search. */
int fs_ahead_init(fs_daemon *dm);
/* End the thread and free dm->ahead (before the store closes). */
void fs_ahead_fini(fs_daemon *dm);
/* Search the complete input (vecs: nq x dim, owned from here on) of
 * version `ver` of session `serial` now, on a thread of its own, unless
 * that thread is busy. */
void fs_ahead_submit(ahead *a, uint64_t serial, uint64_t ver, vecfs *v, const vecfs_query_opts *o,
		  float *vecs, size_t nq, uint32_t dim);
/* The results searched ahead for version `ver` of session `serial`, once
 * done, if they hold for the store as it is now (then counted in its
 * stats); else NULL. */
vecfs_results *fs_ahead_take(ahead *a, uint64_t serial, uint64_t ver, vecfs *v);
/* Closes answered by a search ahead, since the start. */
uint64_t fs_ahead_taken(ahead *a);

#endif
