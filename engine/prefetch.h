/*
 * engine/prefetch.h - the reads of a search planned ahead: the pages a
 * query is about to read from the store are asked of the disk together,
 * before it reads them one by one (prefetch.c), and the count of the pages
 * a searching thread waited for.
 */
#ifndef VF_PREFETCH_H
#define VF_PREFETCH_H

#include <stdint.h>

/* The major page faults of the calling thread so far (each one a page it
 * waited to read from disk); 0 where the system does not say. */
uint64_t vf_thread_major_faults(void);

#endif
