/*
 * engine/maint/stats.c - the store's statistics: counters, sizes, the active
 * generation's shape and the latency of recent queries.
 */
#include "handle.h"
#include "maint.h"
#include "io.h"

#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "query/query.h"

/* Live records whose current version is newer than the generation's packed
 * blocks: they sit in delta postings or are scanned exactly. */
static int count_unindexed(vecfs *v, vf_txn *txn, uint64_t gen, uint64_t *out)
{
	vf_genmeta m;
	vf_counters cnt;
	vf_dirty d;
	int rc;
	*out = 0;
	if ((rc = vf_load_genmeta(txn, v->store, gen, &m)) ||
	    (rc = vf_load_counters(txn, v->store, &cnt)))
		return rc;
	vf_dirty_init(&d);
	rc = vf_dirty_load(txn, v->store, m.blocks_seq, cnt.seq, &d);
	for (uint64_t i = 0; rc == 0 && i < d.cap; i++)
		if (d.slots[i].id && d.slots[i].ch.op == VF_OP_PUT)
			(*out)++;
	vf_dirty_free(&d);
	return rc;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int vecfs_stats_get(vecfs *v, vecfs_stats *out)
{
	vf_txn *txn;
	vf_counters cnt;
	vecfs_config sc;
	size_t ngen = 0;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	memset(out, 0, sizeof *out);
	if ((rc = vf_load_counters(txn, v->store, &cnt)) ||
	    (rc = vf_load_config(txn, v->store, &sc)) ||
	    (rc = vf_list_gens(txn, v->store, NULL, 0, &ngen)))
		goto out;
	out->dim = sc.dim;
	out->metric = (vecfs_metric)sc.metric;
	out->records = cnt.live;
	out->deleted = cnt.deleted;
	out->generations = ngen;
	out->active = vf_load_active(txn, v->store);
	out->ingest_rows = cnt.ingest_rows;
	out->next_key = cnt.next_key;
	out->compactions = cnt.compactions;
	out->rebalances = cnt.rebalances;
	if (out->active) {
		vf_genmeta m;
		uint64_t tombs;
		if ((rc = vf_load_genmeta(txn, v->store, out->active, &m)) ||
		    (rc = vf_sum_manifests(txn, v->store, out->active, m.nlist,
					&out->delta_postings, &tombs)) ||
		    (rc = count_unindexed(v, txn, out->active, &out->unindexed)) ||
		    (rc = vf_cluster_imbalance(txn, v->store, &m, &out->cluster_imbalance)))
			goto out;
	} else {
		out->unindexed = cnt.live;
	}
	out->store_bytes = vf_store_used_bytes(v->store, txn);
out:
	vf_read_end(v->store, txn);
	out->maintenance = vf_maint_busy(v);
	vf_sampler_stats(v, out);
	pthread_mutex_lock(&v->stat_mu);
	out->queries = v->queries;
	out->pages_read = v->pages_read;
	size_t nl = v->nlat < VF_LAT_RING ? v->nlat : VF_LAT_RING;
	uint32_t *tmp = nl ? vf_malloc(sizeof(uint32_t) * nl) : NULL;
	if (tmp)
		memcpy(tmp, v->lat, sizeof(uint32_t) * nl);
	pthread_mutex_unlock(&v->stat_mu);
	if (tmp) {
		qsort(tmp, nl, sizeof *tmp, cmp_u32);
		out->p50_us = tmp[(nl - 1) / 2];
		out->p99_us = tmp[(nl - 1) * 99 / 100];
		free(tmp);
	}
	return rc;
}
