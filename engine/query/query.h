/*
 * engine/query/query.h - what query/ offers the other folders: the sampler
 * of served queries, a search on a given number of threads, filters'
 * matching records (filtered.h) and the payload index (payload_index.h).
 */
#ifndef VF_QUERY_H
#define VF_QUERY_H

#include "handle.h"

/* sampler.c: a share of served ANN queries run again exactly in the
 * background; the estimate in stats. */
typedef struct vf_sampler vf_sampler;
int vf_sampler_init(vecfs *v);
void vf_sampler_fini(vecfs *v);
void vf_sampler_offer(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		      const vecfs_results *r);
void vf_sampler_stats(vecfs *v, vecfs_stats *st);
/* vecfs_search() on at most `threads` threads, the calling one included (0:
 * the store's; 1: the calling thread alone, as the sampler runs, so that its
 * CPU time is all its own and at its priority) (search.c). */
int vf_search_threads(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		      const vecfs_query_opts *opts, int threads, vecfs_results **out,
		      char *err, size_t errlen);

#include "filtered.h"
#include "payload_index.h"

#endif
