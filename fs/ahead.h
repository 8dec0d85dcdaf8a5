/*
 * fs/ahead.h - searching a query ahead of the close that runs it.
 */
#ifndef VECFS_FS_AHEAD_H
#define VECFS_FS_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"

/* Search the complete input (vecs: nq x dim, owned from here on) of
 * version `ver` of session `serial` now, on a thread of its own, unless
 * that thread is busy. */
void ahead_submit(uint64_t serial, uint64_t ver, vecfs *v, const vecfs_query_opts *o,
		  float *vecs, size_t nq, uint32_t dim);
/* The results searched ahead for version `ver` of session `serial`, once
 * done, if they hold for the store as it is now (then counted in its
 * stats); else NULL. */
vecfs_results *ahead_take(uint64_t serial, uint64_t ver, vecfs *v);
/* Closes answered by a search ahead, since the start. */
uint64_t ahead_taken(void);
/* End the thread (before the store closes). */
void ahead_stop(void);

#endif
