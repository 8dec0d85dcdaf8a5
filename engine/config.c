/*
 * engine/config.c - the distance metric and the configuration: defaults,
 * the stored form, get and set.
 */
#include "attrs.h"
#include "handle.h"

#include <errno.h>
#include <math.h>
#include <string.h>

int vf_to_index_space(vecfs_metric m, const float *in, float *out, uint32_t dim)
{
	if (m != VECFS_COSINE) {
		if (out != in)
			memcpy(out, in, sizeof(float) * dim);
		return 0;
	}
	double n2 = 0;
	for (uint32_t i = 0; i < dim; i++)
		n2 += (double)in[i] * in[i];
	if (n2 == 0)
		return -EINVAL;
	/* in double: 1/|in| of a float vector is within double's range, not
	 * always float32's (|in| < 2^-126 or > 2^126) */
	double inv = 1.0 / sqrt(n2);
	for (uint32_t i = 0; i < dim; i++)
		out[i] = (float)(in[i] * inv);
	return 0;
}

void vecfs_config_defaults(vecfs_config *c)
{
	memset(c, 0, sizeof *c);
#define DEFAULT_(slot, name, type, def, lo, hi, meaning) c->name = (VECFS_SETTING_CTYPE_##type)(def);
	VECFS_SETTINGS(DEFAULT_)
#undef DEFAULT_
	c->seed = 0x7665636673ULL;
}

/* ---------------------------------------------------------------- the stored form
 *
 * Version 3: a head, then one 64-bit slot a setting, at the setting's
 * slot number (VECFS_SETTINGS); a slot the store does not have (a setting
 * newer than the store) reads as the default.  Version 4 is the same
 * form, and says the store's records may hold their vectors in bytes
 * (layout/record.h), so that a binary that knows only version 3 refuses
 * the store (-EIO) instead of finding such records damaged (and its
 * salvage removing them).  Version 1 and 2 stores hold
 * vf_stored_config_v2 (layout/meta.h) and are read as they are. */

typedef struct stored_head {
	uint32_t version;
	uint32_t nslots;
	uint64_t seed;
} stored_head;

#define SLOTS_MAX 64
#define CONFIG_BYTES_MAX (sizeof(stored_head) + SLOTS_MAX * sizeof(uint64_t))

static uint64_t to_slot(const vecfs_setting *st, const vecfs_config *c)
{
	const char *field = (const char *)c + st->offset;
	uint32_t u32;
	uint64_t u64;
	float f;
	vecfs_metric m;
	switch (st->type) {
	case VECFS_SETTING_U64:
		memcpy(&u64, field, sizeof u64);
		return u64;
	case VECFS_SETTING_RATIO: /* in millionths */
		memcpy(&f, field, sizeof f);
		return (uint64_t)lrint((double)f * 1e6);
	case VECFS_SETTING_METRIC:
		memcpy(&m, field, sizeof m);
		return (uint64_t)m;
	case VECFS_SETTING_U32:
	case VECFS_SETTING_OFF32:
		break;
	}
	memcpy(&u32, field, sizeof u32);
	return u32;
}

static void from_slot(const vecfs_setting *st, uint64_t x, vecfs_config *c)
{
	char *field = (char *)c + st->offset;
	uint32_t u32 = (uint32_t)x;
	float f = (float)((double)x / 1e6);
	vecfs_metric m = (vecfs_metric)x;
	switch (st->type) {
	case VECFS_SETTING_U64:
		memcpy(field, &x, sizeof x);
		return;
	case VECFS_SETTING_RATIO:
		if (x) /* 0: never stored (the default stays) */
			memcpy(field, &f, sizeof f);
		return;
	case VECFS_SETTING_METRIC:
		memcpy(field, &m, sizeof m);
		return;
	case VECFS_SETTING_U32:
	case VECFS_SETTING_OFF32:
		memcpy(field, &u32, sizeof u32);
		return;
	}
}

int vf_config_save(vf_txn *txn, vf_store *s, const vecfs_config *c)
{
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	unsigned char buf[CONFIG_BYTES_MAX];
	stored_head h = {VF_CONFIG_VERSION, 0, c->seed};
	uint64_t slots[SLOTS_MAX] = {0};
	for (size_t i = 0; i < n; i++) {
		if (rows[i].slot >= SLOTS_MAX)
			return -EINVAL;
		slots[rows[i].slot] = to_slot(&rows[i], c);
		if (rows[i].slot + 1 > h.nslots)
			h.nslots = rows[i].slot + 1;
	}
	memcpy(buf, &h, sizeof h);
	memcpy(buf + sizeof h, slots, h.nslots * sizeof slots[0]);
	return vf_save_config(txn, s, buf, sizeof h + h.nslots * sizeof slots[0]);
}

/* A version 1 or 2 store's configuration. */
static void from_v2(const vf_stored_config_v2 *o, vecfs_config *c)
{
	c->dim = o->dim;
	c->metric = (vecfs_metric)o->metric;
	c->nlist = o->nlist;
	c->bits = o->bits;
	/* version 1 had no recall target, and every query probed nprobe
	 * clusters (32 unless set): the old default becomes the new one, 0,
	 * chosen per query */
	c->nprobe = o->version < 2 && o->nprobe == 32 ? 0 : o->nprobe;
	c->k = o->k;
	c->refine = o->refine;
	c->auto_build = o->auto_build;
	c->compact_deltas = o->compact_deltas;
	c->keep_generations = o->keep_generations;
	c->seed = o->seed;
	c->rebalance_ratio = o->rebalance_ratio;
	if (o->version >= 2 && o->recall_ppm)
		c->recall_target = (float)(o->recall_ppm / 1e6);
}

int vf_load_config_version(vf_txn *txn, vf_store *s, vecfs_config *c, uint32_t *version)
{
	unsigned char buf[CONFIG_BYTES_MAX];
	size_t len = 0;
	vecfs_config_defaults(c);
	*version = 0;
	int rc = vf_load_config_bytes(txn, s, buf, sizeof buf, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	stored_head h;
	if (len == sizeof(vf_stored_config_v2)) {
		vf_stored_config_v2 o;
		memcpy(&o, buf, sizeof o);
		if (o.version > 2)
			return -EIO;
		from_v2(&o, c);
		*version = o.version;
		return 0;
	}
	if (len < sizeof h)
		return -EIO;
	memcpy(&h, buf, sizeof h);
	if (h.version < 3 || h.version > VF_CONFIG_VERSION || h.nslots > SLOTS_MAX ||
	    len != sizeof h + h.nslots * sizeof(uint64_t))
		return -EIO;
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	for (size_t i = 0; i < n; i++)
		if (rows[i].slot < h.nslots) {
			uint64_t x;
			memcpy(&x, buf + sizeof h + rows[i].slot * sizeof x, sizeof x);
			from_slot(&rows[i], x, c);
		}
	c->seed = h.seed;
	*version = h.version;
	return 0;
}

int vf_load_config(vf_txn *txn, vf_store *s, vecfs_config *c)
{
	uint32_t version;
	return vf_load_config_version(txn, s, c, &version);
}

int vecfs_config_get(vecfs *v, vecfs_config *out)
{
	vf_txn *txn;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_load_config(txn, v->store, out);
	vf_read_end(v->store, txn);
	return rc;
}

typedef struct config_job {
	vecfs *v;
	const vecfs_config *c;
	char *err;
	size_t errlen;
} config_job;

static int config_fn(vf_txn *txn, void *arg)
{
	config_job *j = arg;
	vecfs_config old;
	vf_counters cnt;
	int rc;
	if ((rc = vf_load_config(txn, j->v->store, &old)) ||
	    (rc = vf_load_counters(txn, j->v->store, &cnt)))
		return rc;
	int has_data = cnt.next_id > 0 || cnt.live > 0;
	if (has_data && (j->c->dim != old.dim || (uint32_t)j->c->metric != old.metric)) {
		vf_seterr(j->err, j->errlen, "config: %s cannot change once the store has records",
			  j->c->dim != old.dim ? "dim" : "metric");
		return -EBUSY;
	}
	int rc2 = vf_config_save(txn, j->v->store, j->c);
	return rc2 ? rc2 : vf_attrs_touch(txn, j->v->store, VF_TIME_CONFIG);
}

int vecfs_config_set(vecfs *v, const vecfs_config *c, char *err, size_t errlen)
{
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	for (size_t i = 0; i < n; i++) {
		char text[32], back[32], values[64];
		vecfs_config probe = *c;
		/* a value is one of the setting's when it reads back as itself */
		vecfs_setting_format(&rows[i], c, text, sizeof text);
		if (vecfs_setting_parse(&rows[i], text, strlen(text), &probe) ||
		    (vecfs_setting_format(&rows[i], &probe, back, sizeof back), strcmp(text, back))) {
			vf_seterr(err, errlen, "config: %s must be %s", rows[i].name,
				  vecfs_setting_values(&rows[i], values, sizeof values));
			return -EINVAL;
		}
	}
	config_job j = {v, c, err, errlen};
	return vf_write(v->store, config_fn, &j);
}
