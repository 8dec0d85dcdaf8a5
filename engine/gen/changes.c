/*
 * engine/gen/changes.c - the dirty set read from the change log, and the
 * tombstones of a cluster.
 */
#include "changes.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void vf_dirty_init(vf_dirty *d)
{
	memset(d, 0, sizeof *d);
}

void vf_dirty_free(vf_dirty *d)
{
	free(d->slots);
	memset(d, 0, sizeof *d);
}

static uint64_t hash64(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ULL;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dULL;
	return x ^ (x >> 33);
}

static vf_dirty_entry *slot_for(vf_dirty_entry *slots, uint64_t cap, uint64_t id)
{
	uint64_t i = hash64(id) & (cap - 1);
	while (slots[i].id && slots[i].id != id + 1)
		i = (i + 1) & (cap - 1);
	return &slots[i];
}

static int grow(vf_dirty *d)
{
	uint64_t cap = d->cap ? d->cap * 2 : 64;
	vf_dirty_entry *ns = vf_calloc(cap, sizeof *ns);
	if (!ns)
		return -ENOMEM;
	for (uint64_t i = 0; i < d->cap; i++)
		if (d->slots[i].id)
			*slot_for(ns, cap, d->slots[i].id - 1) = d->slots[i];
	free(d->slots);
	d->slots = ns;
	d->cap = cap;
	return 0;
}

const vf_dirty_entry *vf_dirty_find(const vf_dirty *d, uint64_t id)
{
	if (!d->n)
		return NULL;
	const vf_dirty_entry *e = slot_for(d->slots, d->cap, id);
	return e->id ? e : NULL;
}

int vf_dirty_load(vf_txn *txn, vf_store *s, uint64_t from, uint64_t to, vf_dirty *d)
{
	vf_cursor *cur;
	vf_change c;
	uint64_t seq;
	int rc;
	if (to <= from)
		return 0;
	if ((rc = vf_cursor_open(txn, s->changes, &cur)))
		return vf_store_err(rc);
	for (rc = vf_changes_walk(cur, VF_SEEK, from + 1, &seq, &c); rc == 0;
	     rc = vf_changes_walk(cur, VF_NEXT, 0, &seq, &c)) {
		if (seq > to)
			break;
		if ((d->n + 1) * 2 > d->cap && (rc = grow(d)))
			break;
		vf_dirty_entry *e = slot_for(d->slots, d->cap, c.id);
		if (!e->id) {
			e->id = c.id + 1;
			d->n++;
		}
		e->seq = seq;
		e->ch = c;
	}
	vf_cursor_close(cur);
	if (rc == -ENOENT)
		rc = 0;
	return rc;
}

static uint64_t mixid(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	return x ^ (x >> 29);
}

void vf_tombs_free(vf_tombs *t)
{
	free(t->id);
	free(t->seq);
	memset(t, 0, sizeof *t);
}

void vf_tombs_clear(vf_tombs *t)
{
	if (t->n)
		memset(t->id, 0xFF, sizeof(uint64_t) * t->cap);
	t->n = 0;
}

int vf_tombs_add(vf_tombs *t, uint64_t id, uint64_t seq)
{
	if ((t->n + 1) * 2 > t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 64;
		uint64_t *ni = vf_malloc(sizeof(uint64_t) * cap), *ns = vf_malloc(sizeof(uint64_t) * cap);
		if (!ni || !ns) {
			free(ni);
			free(ns);
			return -ENOMEM;
		}
		memset(ni, 0xFF, sizeof(uint64_t) * cap);
		for (uint32_t i = 0; i < t->cap; i++)
			if (t->id[i] != UINT64_MAX) {
				uint32_t h = mixid(t->id[i]) & (cap - 1);
				while (ni[h] != UINT64_MAX)
					h = (h + 1) & (cap - 1);
				ni[h] = t->id[i];
				ns[h] = t->seq[i];
			}
		free(t->id);
		free(t->seq);
		t->id = ni;
		t->seq = ns;
		t->cap = cap;
	}
	uint32_t h = mixid(id) & (t->cap - 1);
	while (t->id[h] != UINT64_MAX && t->id[h] != id)
		h = (h + 1) & (t->cap - 1);
	if (t->id[h] == UINT64_MAX)
		t->n++;
	t->id[h] = id;
	t->seq[h] = seq;
	return 0;
}

int vf_tombs_has(const vf_tombs *t, uint64_t id, uint64_t *seq)
{
	if (!t->n)
		return 0;
	for (uint32_t h = mixid(id) & (t->cap - 1); t->id[h] != UINT64_MAX;
	     h = (h + 1) & (t->cap - 1))
		if (t->id[h] == id) {
			if (seq)
				*seq = t->seq[h];
			return 1;
		}
	return 0;
}

int vf_posting_stale(const vf_tombs *t, const vf_dirty *d, uint64_t id, uint64_t seq)
{
	uint64_t kill;
	if (vf_tombs_has(t, id, &kill) && seq < kill)
		return 1;
	if (d->n) {
		/* changed since the generation was synced: only a posting of the
		 * newest version counts */
		const vf_dirty_entry *e = vf_dirty_find(d, id);
		if (e && (e->ch.op != VF_OP_PUT || e->seq != seq))
			return 1;
	}
	return 0;
}
