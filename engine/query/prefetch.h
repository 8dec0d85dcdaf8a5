/*
 * engine/query/prefetch.h - the reads of a search planned ahead: the pages a
 * query is about to read from the store (its clusters' posting blocks,
 * the records its re-rank will read) are asked of the disk together,
 * before it reads them one by one (prefetch.c).
 */
#ifndef VF_PREFETCH_H
#define VF_PREFETCH_H

#include <stdint.h>

#include "search_internal.h"

/* (vf_thread_major_faults(), layout/store.h: the pages a searching
 * thread waited for.) */

/* Whether a search now plans its reads: while the store's searches
 * wait for pages (one did in the last VF_PREFETCH_HOLD_NS, and
 * VF_PREFETCH_CALM searches in a row have not all waited for none), and
 * before the first search of an open; never once they have stopped
 * waiting, so a store in memory pays nothing.  v->prefetch_mode forces it
 * (tests). */
#define VF_PREFETCH_HOLD_NS 2000000000ull
#define VF_PREFETCH_CALM 64
int vf_prefetch_wanted(vecfs *v);
/* A search's threads waited for `pages` pages (vf_thread_major_faults()). */
void vf_prefetch_note(vecfs *v, uint64_t pages);

/* The located entries ents[0..n) of the clusters about to be scanned:
 * their posting blocks and delta postings read from disk at once. */
void vf_prefetch_entries(const search *s, const entry *ents, size_t n);
/* Before the re-rank of each query of s that scanned clusters
 * (probe[from..np)): the records of its candidates most likely to be read
 * (the 2k best lower bounds that can still enter its top k), where their
 * location hints say they are.  (Again before the second look's.) */
int vf_prefetch_reranks(search *s);

#endif
