/*
 * engine/query/payload_index.c - the payload index and its planner.
 *
 * Keys of the `payloads` family (layout/store.h), no values:
 *   path | 0 | type | value | id      one term of one record's payload
 *   0xff | id                         a record whose payload is not all indexed
 * where value is, for a number, its double's bits made to sort as the
 * numbers do (8 bytes), for a string its bytes and a 0 (strings hold no
 * 0), and nothing for true, false and null.  Every key is written and
 * deleted in the transaction that writes or deletes its record.
 *
 * The planner: a field test with a scalar operand ($eq, $in, $gt, $gte,
 * $lt, $lte) reads the ids of its value or range of values; $and takes its
 * smallest kid, $or the union of its kids; anything else ($not, $ne, $nin,
 * $exists, array or object operands) can be any record.  The records not
 * all indexed join every set.  The set is a superset: each of its records
 * is tested against the filter itself (filtered.c).
 */
#include "payload_index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "keys.h"
#include "record.h"

#define PK_MAX (VF_TERM_PATH_MAX + 3 + VF_TERM_STR_MAX + 8)
#define UNINDEXED 0xff
#define META_KEY "payload_index"

static void be64(uint8_t *b, uint64_t x)
{
	for (int i = 7; i >= 0; i--, x >>= 8)
		b[i] = (uint8_t)x;
}

static uint64_t rd64(const uint8_t *b)
{
	uint64_t x = 0;
	for (int i = 0; i < 8; i++)
		x = x << 8 | b[i];
	return x;
}

/* A double's bits, made to sort as unsigned bytes as the numbers do. */
static void enc_num(double x, uint8_t b[8])
{
	uint64_t u;
	memcpy(&u, &x, 8);
	be64(b, u >> 63 ? ~u : u | 1ULL << 63);
}

/* path | 0 | type: the family of a field's values of one type. */
static size_t family(const char *path, uint32_t plen, uint8_t type, uint8_t *k)
{
	memcpy(k, path, plen);
	k[plen] = 0;
	k[plen + 1] = type;
	return plen + 2;
}

/* path | 0 | type | value: the prefix of a term's keys.  A filter's
 * string may be longer than any indexed one (those are shorter than
 * VF_TERM_STR_MAX): it is cut there, which no indexed value's key begins
 * with, and which still sorts at or below the whole string. */
static size_t term_prefix(const char *path, uint32_t plen, const vf_term *t, uint8_t *k)
{
	size_t n = family(path, plen, t->type, k);
	if (t->type == VF_T_NUM) {
		enc_num(t->num, k + n);
		n += 8;
	} else if (t->type == VF_T_STR) {
		size_t sl = t->slen < VF_TERM_STR_MAX ? t->slen : VF_TERM_STR_MAX;
		memcpy(k + n, t->s, sl);
		n += sl;
		k[n++] = 0;
	}
	return n;
}

/* ------------------------------------------------------------ upkeep */

typedef struct upkeep {
	vf_txn *txn;
	vf_store *s;
	vf_pidx_batch *b; /* NULL: applied at once */
	uint64_t id;
	int del;
} upkeep;

static int apply(vf_txn *txn, vf_store *s, const uint8_t *k, size_t n, int del)
{
	if (!del)
		return vf_put(txn, s->payloads, k, n, "", 0, 0);
	int rc = vf_del(txn, s->payloads, k, n);
	return rc == -ENOENT ? 0 : rc; /* a term twice in one payload */
}

static int upkeep_key(upkeep *u, uint8_t *k, size_t n)
{
	be64(k + n, u->id);
	n += 8;
	vf_pidx_batch *b = u->b;
	if (!b)
		return apply(u->txn, u->s, k, n, u->del);
	if (vf_bytes_reserve(&b->arena, &b->cap, b->used + n) || VF_GROW(b->ops, b->n, b->capn, 2048))
		return -ENOMEM;
	memcpy(b->arena + b->used, k, n);
	b->ops[b->n] = (struct vf_pidx_op){(uint32_t)b->used, (uint16_t)n, (uint8_t)u->del,
					  (uint32_t)b->n};
	b->used += n;
	b->n++;
	return b->used >= VF_PIDX_BATCH_BYTES ? vf_pidx_flush(u->txn, u->s, b) : 0;
}

static int cmp_op(const void *x, const void *y, void *arena)
{
	const struct vf_pidx_op *a = x, *b = y;
	const uint8_t *ar = arena;
	int c = memcmp(ar + a->off, ar + b->off, a->len < b->len ? a->len : b->len);
	if (c || a->len != b->len)
		return c ? c : a->len < b->len ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int vf_pidx_flush(vf_txn *txn, vf_store *s, vf_pidx_batch *b)
{
	int rc = 0;
	if (!b->n)
		return 0;
	/* in key order, one write a key: its last change (each is idempotent,
	 * and changes of different keys commute) */
	qsort_r(b->ops, b->n, sizeof *b->ops, cmp_op, b->arena);
	for (size_t i = 0; i < b->n && rc == 0; i++) {
		const struct vf_pidx_op *o = &b->ops[i];
		if (i + 1 < b->n && b->ops[i + 1].len == o->len &&
		    !memcmp(b->arena + b->ops[i + 1].off, b->arena + o->off, o->len))
			continue; /* a later change of the same key */
		rc = apply(txn, s, b->arena + o->off, o->len, o->del);
	}
	b->n = b->used = 0;
	return rc;
}

void vf_pidx_batch_free(vf_pidx_batch *b)
{
	free(b->arena);
	free(b->ops);
	memset(b, 0, sizeof *b);
}

static int upkeep_term(const vf_term *t, void *ctx)
{
	uint8_t k[PK_MAX];
	return upkeep_key(ctx, k, term_prefix(t->path, t->plen, t, k));
}

static int upkeep_run(upkeep *u, const void *payload, size_t plen)
{
	if (!u->s->has_payloads || !payload || !plen)
		return 0;
	int rc = vf_payload_terms(payload, plen, upkeep_term, u);
	if (rc == VF_TERMS_PARTIAL) {
		uint8_t k[9] = {UNINDEXED};
		rc = upkeep_key(u, k, 1);
	}
	return rc;
}

int vf_pidx_add(vf_txn *txn, vf_store *s, vf_pidx_batch *b, uint64_t id, const void *payload,
		size_t plen)
{
	return upkeep_run(&(upkeep){txn, s, b, id, 0}, payload, plen);
}

int vf_pidx_remove_record(vf_txn *txn, vf_store *s, vf_pidx_batch *b, uint64_t id)
{
	vf_val v;
	vf_record r;
	if (!s->has_payloads)
		return 0;
	int rc = vf_records_get(txn, s, id, &v);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	if (vf_record_fields(v.data, v.len, &r)) { /* indexed as matching anything */
		uint8_t u[9] = {UNINDEXED};
		return upkeep_key(&(upkeep){txn, s, b, id, 1}, u, 1);
	}
	if (!r.plen)
		return 0;
	/* a copy: the deletes may move the pages of this write transaction */
	void *copy = vf_malloc(r.plen);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, r.payload, r.plen);
	rc = upkeep_run(&(upkeep){txn, s, b, id, 1}, copy, r.plen);
	free(copy);
	return rc;
}

int vf_pidx_ready(vf_txn *txn, vf_store *s)
{
	vf_val v;
	return s->has_payloads &&
	       vf_get(txn, s->meta, META_KEY, strlen(META_KEY), &v) == 0 && v.len == 4;
}

int vf_pidx_rebuild(vf_txn *txn, vf_store *s, uint64_t *indexed)
{
	vf_cursor *cur;
	vf_val k, d;
	uint8_t one[4] = {0, 0, 0, 1};
	int rc;
	vf_pidx_batch b = {0};
	*indexed = 0;
	if (!s->has_payloads)
		return -EROFS;
	if ((rc = vf_clear(txn, s->payloads)) || (rc = vf_cursor_open(txn, s->records, &cur)))
		return rc;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		vf_record r;
		if (k.len != 8)
			continue;
		uint64_t id = vf_rd_be64(k.data);
		if (vf_record_fields(d.data, d.len, &r)) { /* unreadable: matches anything */
			uint8_t u[9] = {UNINDEXED};
			if ((rc = upkeep_key(&(upkeep){txn, s, &b, id, 0}, u, 1)))
				break;
			continue;
		}
		if (r.plen) {
			(*indexed)++;
			if ((rc = vf_pidx_add(txn, s, &b, id, r.payload, r.plen)))
				break;
		}
	}
	vf_cursor_close(cur);
	if (rc == -ENOENT)
		rc = vf_pidx_flush(txn, s, &b);
	vf_pidx_batch_free(&b);
	if (rc)
		return rc;
	return vf_put(txn, s->meta, META_KEY, strlen(META_KEY), one, sizeof one, 0);
}

/* ------------------------------------------------------------ the planner */

typedef struct idv {
	uint64_t *v;
	size_t n, cap;
} idv;

enum { PLAN_ALL = VF_PIDX_ALL };

static int idv_push(idv *a, uint64_t id, size_t budget)
{
	if (a->n >= budget)
		return PLAN_ALL;
	if (VF_GROW(a->v, a->n, a->cap, 256))
		return -ENOMEM;
	a->v[a->n++] = id;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void idv_sort(idv *a)
{
	if (a->n < 2)
		return;
	qsort(a->v, a->n, sizeof *a->v, cmp_u64);
	size_t w = 1;
	for (size_t i = 1; i < a->n; i++)
		if (a->v[i] != a->v[w - 1])
			a->v[w++] = a->v[i];
	a->n = w;
}

typedef struct plan {
	vf_cursor *cur;
	const vf_filter *f;
} plan;

/* Every id of the keys that start with pre[0..pn) and have `tail` bytes
 * of value after it (then the id). */
static int scan_eq(plan *p, const uint8_t *pre, size_t pn, idv *out, size_t budget)
{
	vf_val k, d;
	int rc;
	for (rc = vf_cursor_prefix(p->cur, pre, pn, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_prefix(p->cur, pre, pn, &k, &d, VF_NEXT))
		if (k.len == pn + 8 && (rc = idv_push(out, rd64((uint8_t *)k.data + pn), budget)))
			return rc;
	return rc == -ENOENT ? 0 : rc;
}

/* Is the value of a key (its bytes from v to the id) above (>0), at (0) or
 * below (<0) the term a of the key's type? */
static int value_cmp(const uint8_t *v, size_t vl, const vf_term *a, const uint8_t *enc)
{
	if (a->type == VF_T_NUM)
		return memcmp(v, enc, 8);
	size_t sl = vl - 1, al = a->slen; /* the string less its 0 */
	int c = memcmp(v, a->s, sl < al ? sl : al);
	return c ? c : sl < al ? -1 : sl > al;
}

/* The ids whose value of one type at a path is above lo (at or above,
 * unless lo_strict) and below hi (likewise); lo or hi NULL: no bound.
 * The values are read in order from the lowest that can pass. */
static int scan_range(plan *p, const char *path, uint32_t plen, uint8_t type,
		      const vf_term *lo, int lo_strict, const vf_term *hi, int hi_strict,
		      idv *out, size_t budget)
{
	uint8_t start[PK_MAX], lo_enc[8], hi_enc[8];
	if (plen >= VF_TERM_PATH_MAX)
		return PLAN_ALL; /* a filter's path longer than any indexed one */
	size_t fn = family(path, plen, type, start), sn = fn;
	if (lo)
		sn = term_prefix(path, plen, lo, start) - (type == VF_T_STR);
	if (lo && type == VF_T_NUM)
		enc_num(lo->num, lo_enc);
	if (hi && type == VF_T_NUM)
		enc_num(hi->num, hi_enc);
	vf_val k = {sn, start}, d;
	int rc;
	for (rc = vf_cursor_get(p->cur, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_get(p->cur, &k, &d, VF_NEXT)) {
		const uint8_t *kb = k.data;
		if (k.len < fn || memcmp(kb, start, fn))
			break; /* past the family */
		if (k.len < fn + 8 + (type == VF_T_NUM ? 8 : 1))
			continue;
		size_t vl = k.len - fn - 8;
		int c;
		if (hi && ((c = value_cmp(kb + fn, vl, hi, hi_enc)) > 0 || (hi_strict && c == 0)))
			break;
		if (lo && ((c = value_cmp(kb + fn, vl, lo, lo_enc)) < 0 || (lo_strict && c == 0)))
			continue;
		if ((rc = idv_push(out, rd64(kb + k.len - 8), budget)))
			return rc;
	}
	return rc == -ENOENT ? 0 : rc;
}

/* The ids of one field test's value(s), into out. */
static int plan_field(plan *p, uint32_t node, const vf_fnode_view *x, idv *out, size_t budget)
{
	uint8_t k[PK_MAX];
	vf_term t;
	int rc;
	if (x->plen >= VF_TERM_PATH_MAX)
		return PLAN_ALL; /* a filter's path longer than any indexed one */
	for (uint32_t i = 0; i < x->n; i++) {
		if (vf_filter_operand(p->f, node, i, &t))
			return PLAN_ALL; /* an array or object: compared whole */
		if (x->op == VF_FN_EQ || x->op == VF_FN_IN)
			rc = scan_eq(p, k, term_prefix(x->path, x->plen, &t, k), out, budget);
		else if (t.type != VF_T_NUM && t.type != VF_T_STR)
			rc = 0; /* a comparison with true, false or null: nothing passes */
		else if (x->op == VF_FN_GT || x->op == VF_FN_GTE)
			rc = scan_range(p, x->path, x->plen, t.type, &t, x->op == VF_FN_GT, NULL, 0,
					out, budget);
		else
			rc = scan_range(p, x->path, x->plen, t.type, NULL, 0, &t, x->op == VF_FN_LT,
					out, budget);
		if (rc)
			return rc;
	}
	return 0;
}

/* The node, or the only kid of an $and of one (a field's operators). */
static uint32_t single(plan *p, uint32_t node, vf_fnode_view *x)
{
	for (;;) {
		vf_filter_view(p->f, node, x);
		if (x->op != VF_FN_AND || x->n != 1)
			return node;
		node = vf_filter_kid(p->f, node, 0);
	}
}

/* A comparison of a field with a number or string: 1 and its operand. */
static int comparison(plan *p, uint32_t node, const vf_fnode_view *x, vf_term *t)
{
	return x->op >= VF_FN_GT && x->op <= VF_FN_LTE && vf_filter_operand(p->f, node, 0, t) == 0 &&
	       (t->type == VF_T_NUM || t->type == VF_T_STR);
}

static int plan_node(plan *p, uint32_t node, idv *out, size_t budget);

/* Kid i of an $and, or, when it is a lower bound of a field and a later
 * kid an upper bound of the same field and type, the two as one range
 * (that kid then marked used). */
static int plan_and_kid(plan *p, uint32_t node, uint32_t n, uint32_t i, uint8_t *used,
			idv *out, size_t budget)
{
	vf_fnode_view x, y;
	vf_term lo, hi;
	uint32_t a = single(p, vf_filter_kid(p->f, node, i), &x);
	if (comparison(p, a, &x, &lo) && (x.op == VF_FN_GT || x.op == VF_FN_GTE))
		for (uint32_t j = i + 1; j < n; j++) {
			uint32_t b = single(p, vf_filter_kid(p->f, node, j), &y);
			if (used[j] || !comparison(p, b, &y, &hi) ||
			    (y.op != VF_FN_LT && y.op != VF_FN_LTE) || hi.type != lo.type ||
			    y.plen != x.plen || memcmp(y.path, x.path, x.plen))
				continue;
			used[j] = 1;
			return scan_range(p, x.path, x.plen, lo.type, &lo, x.op == VF_FN_GT, &hi,
					  y.op == VF_FN_LT, out, budget);
		}
	return plan_node(p, a, out, budget);
}

/* A superset of node's matches into out (at most budget ids, else
 * PLAN_ALL), in no order, maybe repeated. */
static int plan_node(plan *p, uint32_t node, idv *out, size_t budget)
{
	vf_fnode_view x;
	vf_filter_view(p->f, node, &x);
	switch (x.op) {
	case VF_FN_AND: {
		/* the smallest kid's set (two bounds of a field: one kid) */
		idv best = {0};
		int have = 0, rc = 0;
		uint8_t *used = vf_calloc(x.n ? x.n : 1, 1);
		if (!used)
			return -ENOMEM;
		for (uint32_t i = 0; i < x.n && rc >= 0; i++) {
			idv kid = {0};
			if (used[i])
				continue;
			rc = plan_and_kid(p, node, x.n, i, used, &kid, have ? best.n : budget);
			if (rc == 0) {
				free(best.v);
				best = kid;
				have = 1;
				if (best.n == 0)
					break;
			} else {
				free(kid.v);
			}
		}
		free(used);
		if (rc < 0 || !have) {
			free(best.v);
			return rc < 0 ? rc : PLAN_ALL;
		}
		rc = 0;
		for (size_t i = 0; i < best.n && rc == 0; i++)
			rc = idv_push(out, best.v[i], budget);
		free(best.v);
		return rc;
	}
	case VF_FN_OR:
		for (uint32_t i = 0; i < x.n; i++) {
			int rc = plan_node(p, vf_filter_kid(p->f, node, i), out, budget);
			if (rc)
				return rc;
		}
		return 0;
	case VF_FN_OTHER:
		return PLAN_ALL;
	default:
		return plan_field(p, node, &x, out, budget);
	}
}

int vf_pidx_candidates(vf_txn *txn, vf_store *s, const vf_filter *f, size_t budget,
		       uint64_t **ids, size_t *n)
{
	plan p = {.f = f};
	idv out = {0};
	uint8_t un[1] = {UNINDEXED};
	int rc;
	*ids = NULL;
	*n = 0;
	if (!vf_pidx_ready(txn, s))
		return PLAN_ALL;
	if ((rc = vf_cursor_open(txn, s->payloads, &p.cur)))
		return rc;
	rc = plan_node(&p, vf_filter_root(f), &out, budget);
	if (rc == 0)
		rc = scan_eq(&p, un, 1, &out, budget);
	vf_cursor_close(p.cur);
	if (rc) {
		free(out.v);
		return rc;
	}
	idv_sort(&out);
	*ids = out.v;
	*n = out.n;
	return 0;
}

/* ------------------------------------------------------------ checking */

typedef struct check {
	uint8_t (*keys)[PK_MAX];
	size_t *lens;
	size_t n;
} check;

static int check_term(const vf_term *t, void *ctx)
{
	check *c = ctx;
	if (c->n < VF_TERMS_MAX)
		c->lens[c->n] = term_prefix(t->path, t->plen, t, c->keys[c->n]);
	c->n++;
	return 0;
}

static int cmp_key(const check *c, size_t a, size_t b)
{
	size_t la = c->lens[a], lb = c->lens[b];
	int r = memcmp(c->keys[a], c->keys[b], la < lb ? la : lb);
	return r ? r : la < lb ? -1 : la > lb;
}

int vf_pidx_check(vf_txn *txn, vf_store *s, char *err, size_t errlen)
{
	if (!vf_pidx_ready(txn, s))
		return 0;
	check c = {vf_malloc((VF_TERMS_MAX + 1) * sizeof *c.keys),
		   vf_malloc((VF_TERMS_MAX + 1) * sizeof *c.lens), 0};
	vf_cursor *cur;
	vf_val k, d;
	uint64_t want = 0, have = 0, id = 0;
	int missing = 0, rc = -ENOMEM;
	if (!c.keys || !c.lens || (rc = vf_cursor_open(txn, s->records, &cur)))
		goto out;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0 && !missing;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		vf_record r;
		if (k.len != 8)
			continue;
		id = vf_rd_be64(k.data);
		c.n = 0;
		int t = vf_record_fields(d.data, d.len, &r) ? VF_TERMS_PARTIAL
			: r.plen ? vf_payload_terms(r.payload, r.plen, check_term, &c) : 0;
		if (t == VF_TERMS_PARTIAL) {
			c.keys[c.n][0] = UNINDEXED;
			c.lens[c.n++] = 1;
		}
		for (size_t i = 0; i < c.n && rc == 0 && !missing; i++) {
			size_t j = 0;
			while (j < i && cmp_key(&c, i, j))
				j++;
			if (j < i)
				continue; /* a term twice: one key */
			want++;
			be64(c.keys[i] + c.lens[i], id);
			vf_val v;
			rc = vf_get(txn, s->payloads, c.keys[i], c.lens[i] + 8, &v);
			if (rc == -ENOENT) {
				missing = 1;
				rc = 0;
			}
		}
		if (rc || missing)
			break;
	}
	vf_cursor_close(cur);
	if (rc != -ENOENT && (rc || !missing))
		goto out;
	if (missing) {
		snprintf(err, errlen, "payload index: terms of record %llu are missing",
			 (unsigned long long)id);
		rc = -EIO;
		goto out;
	}
	if ((rc = vf_cursor_open(txn, s->payloads, &cur)))
		goto out;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT))
		have++;
	vf_cursor_close(cur);
	if (rc == -ENOENT)
		rc = 0;
	if (rc == 0 && have != want) {
		snprintf(err, errlen, "payload index: %llu keys where the records have %llu",
			 (unsigned long long)have, (unsigned long long)want);
		rc = -EIO;
	}
out:
	free(c.keys);
	free(c.lens);
	return rc;
}
