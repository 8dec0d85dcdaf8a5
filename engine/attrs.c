/*
 * engine/attrs.c - what ordinary file tools ask of a store without reading
 * it whole: when things changed (the store's creation, the last setting,
 * the last write of records, the last change of generations, the commit
 * that wrote each record's current version) and how large its exports are
 * (the export's lines, the backup's copy).  And the export itself: every
 * live record as a JSON line, in key order, from one snapshot.
 *
 * Kept in the meta family: "export_bytes" (the export's length), the times
 * "created_ns", "config_ns", "records_ns", "gens_ns" (nanoseconds since
 * the epoch) and, for every commit that wrote records, "T" + its first
 * sequence number (big-endian) -> its time: a record's time is that of
 * the greatest entry at or below its sequence number.  A store made before
 * these were kept gets them when a write open first finds them missing:
 * its records then date from that open.
 */
#include "attrs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keys.h"
#include "record.h"

#define EXPORT_KEY "export_bytes"
#define EXPORT_UNMAP_BYTES ((size_t)32 << 20) /* of records read between unmaps */
#define TIME_PREFIX 'T'

static const char *const time_keys[VF_TIME_KINDS] = {"created_ns", "config_ns", "records_ns",
						      "gens_ns"};

uint64_t vf_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- the export's lines */

/* Bytes of key as a JSON string's contents: '"' and '\' escaped, control
 * characters as \u00XX, the rest (UTF-8) as it is. */
static size_t json_key_len(const char *k, size_t n)
{
	size_t len = n;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)k[i];
		len += c == '"' || c == '\\' ? 1 : c < 0x20 ? 5 : 0;
	}
	return len;
}

static char *json_key(char *p, const char *k, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)k[i];
		if (c == '"' || c == '\\') {
			*p++ = '\\';
			*p++ = (char)c;
		} else if (c < 0x20) {
			memcpy(p, "\\u00", 4);
			p[4] = hex[c >> 4];
			p[5] = hex[c & 15];
			p += 6;
		} else {
			*p++ = (char)c;
		}
	}
	return p;
}

#define HEAD "{\"key\":\""
#define MID "\",\"vector\":["
#define PAY "],\"payload\":"
#define END_PAY "}\n"
#define END "]}\n"

size_t vf_export_line_len(const vf_record *r)
{
	size_t len = strlen(HEAD) + json_key_len(r->key, r->keylen) + strlen(MID);
	const uint8_t *v = r->vec;
	/* each number VECFS_FLOAT_E_LEN bytes and its sign; commas between */
	len += (size_t)r->dim * VECFS_FLOAT_E_LEN + (r->dim ? r->dim - 1 : 0);
	for (uint32_t i = 0; r->kind != VF_VEC_U8 && i < r->dim; i++)
		len += v[4 * i + 3] >> 7; /* (bytes 0..255 have no sign) */
	return len + (r->plen ? strlen(PAY) + r->plen + strlen(END_PAY) : strlen(END));
}

size_t vf_export_line(char *out, const vf_record *r)
{
	char *p = out;
	memcpy(p, HEAD, strlen(HEAD));
	p = json_key(p + strlen(HEAD), r->key, r->keylen);
	memcpy(p, MID, strlen(MID));
	p += strlen(MID);
	for (uint32_t i = 0; i < r->dim; i++) {
		float f;
		if (r->kind == VF_VEC_U8)
			f = ((const uint8_t *)r->vec)[i];
		else
			memcpy(&f, (const uint8_t *)r->vec + 4 * i, 4);
		if (i)
			*p++ = ',';
		p += vecfs_format_float_e(p, f);
	}
	if (r->plen) {
		memcpy(p, PAY, strlen(PAY));
		p += strlen(PAY);
		memcpy(p, r->payload, r->plen);
		p += r->plen;
		memcpy(p, END_PAY, strlen(END_PAY));
		p += strlen(END_PAY);
	} else {
		memcpy(p, END, strlen(END));
		p += strlen(END);
	}
	return (size_t)(p - out);
}

/* ---------------------------------------------------------------- kept figures */

static int load_u64(vf_txn *txn, vf_store *s, const char *key, uint64_t *out)
{
	return vf_load_meta(txn, s, key, out, sizeof *out);
}

static int save_u64(vf_txn *txn, vf_store *s, const char *key, uint64_t v)
{
	return vf_put(txn, s->meta, key, strlen(key), &v, sizeof v, 0);
}

int vf_attrs_write(vf_txn *txn, vf_store *s, int64_t export_delta, uint64_t first_seq)
{
	uint64_t bytes, now = vf_now_ns();
	int rc = load_u64(txn, s, EXPORT_KEY, &bytes);
	if (rc == 0 && export_delta)
		rc = save_u64(txn, s, EXPORT_KEY, bytes + (uint64_t)export_delta);
	else if (rc == -ENOENT)
		rc = 0; /* not kept yet: the next write open counts it */
	if (rc == 0 && first_seq) {
		uint8_t k[9] = {TIME_PREFIX};
		vf_be64(k + 1, first_seq);
		rc = vf_put(txn, s->meta, k, sizeof k, &now, sizeof now, 0);
	}
	if (rc == 0)
		rc = save_u64(txn, s, time_keys[VF_TIME_RECORDS], now);
	return rc;
}

int vf_attrs_touch(vf_txn *txn, vf_store *s, int kind)
{
	return save_u64(txn, s, time_keys[kind], vf_now_ns());
}

int vf_export_len_of(const void *data, size_t len, uint64_t *out)
{
	vf_record r;
	int rc = vf_record_fields(data, len, &r);
	if (rc == 0)
		*out = vf_export_line_len(&r);
	return rc;
}

/* The export's length, counted over every record of the snapshot. */
static int export_count(vf_txn *txn, vf_store *s, uint64_t *bytes)
{
	vf_cursor *cur;
	vf_val k, d;
	int rc = vf_cursor_open(txn, s->records, &cur);
	*bytes = 0;
	if (rc)
		return rc;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0; rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		uint64_t n;
		if (k.len == 8 && vf_export_len_of(d.data, d.len, &n) == 0)
			*bytes += n;
	}
	vf_cursor_close(cur);
	return rc == -ENOENT ? 0 : rc;
}

int vf_attrs_recount(vf_txn *txn, vf_store *s)
{
	uint64_t bytes;
	int rc = export_count(txn, s, &bytes);
	return rc ? rc : save_u64(txn, s, EXPORT_KEY, bytes);
}

int vf_attrs_upgrade(vf_txn *txn, vf_store *s)
{
	uint64_t v, now = vf_now_ns();
	int rc = 0;
	for (int i = 0; i < VF_TIME_KINDS && rc == 0; i++)
		if ((rc = load_u64(txn, s, time_keys[i], &v)) == -ENOENT)
			rc = save_u64(txn, s, time_keys[i], now);
	if (rc == 0 && (rc = load_u64(txn, s, EXPORT_KEY, &v)) == -ENOENT)
		rc = vf_attrs_recount(txn, s);
	if (rc == 0) { /* the records written before times were kept */
		uint8_t k[9] = {TIME_PREFIX};
		vf_val d;
		if ((rc = vf_get(txn, s->meta, k, sizeof k, &d)) == -ENOENT)
			rc = vf_put(txn, s->meta, k, sizeof k, &now, sizeof now, 0);
	}
	return rc;
}

/* ---------------------------------------------------------------- the public side */

int vecfs_attrs_get(vecfs *v, vecfs_attrs *out)
{
	vf_txn *txn;
	uint64_t t[VF_TIME_KINDS] = {0};
	int rc = vf_read_begin(v->store, &txn);
	memset(out, 0, sizeof *out);
	if (rc)
		return rc;
	for (int i = 0; i < VF_TIME_KINDS && rc == 0; i++)
		if ((rc = load_u64(txn, v->store, time_keys[i], &t[i])) == -ENOENT)
			rc = 0;
	if (rc == 0 && (rc = load_u64(txn, v->store, EXPORT_KEY, &out->export_bytes)) == -ENOENT)
		rc = export_count(txn, v->store, &out->export_bytes); /* a store opened read-only */
	if (rc == 0)
		out->backup_bytes = vf_store_copy_bytes(v->store, txn);
	vf_read_end(v->store, txn);
	out->created_ns = t[VF_TIME_CREATED];
	out->config_ns = t[VF_TIME_CONFIG];
	out->records_ns = t[VF_TIME_RECORDS];
	out->gens_ns = t[VF_TIME_GENS];
	return rc;
}

int vecfs_record_time(vecfs *v, const char *key, size_t keylen, uint64_t *ns)
{
	vf_txn *txn;
	vf_cursor *cur;
	uint64_t id;
	vf_val d, k;
	vf_record r;
	int rc = vf_read_begin(v->store, &txn);
	*ns = 0;
	if (rc)
		return rc;
	if ((rc = vf_keys_get(txn, v->store, key, keylen, &id)) ||
	    (rc = vf_records_get(txn, v->store, id, &d)) || (rc = vf_record_fields(d.data, d.len, &r)))
		goto out;
	/* the greatest "T" entry at or below the record's sequence number: the
	 * first above it, then one back */
	uint8_t want[9] = {TIME_PREFIX};
	vf_be64(want + 1, r.seq);
	if ((rc = vf_cursor_open(txn, v->store->meta, &cur)))
		goto out;
	k = (vf_val){sizeof want, want};
	int at = vf_cursor_get(cur, &k, &d, VF_SEEK);
	int exact = at == 0 && k.len == 9 && !memcmp(k.data, want, 9);
	if (!exact)
		at = at == 0 ? vf_cursor_get(cur, &k, &d, VF_PREV) : vf_cursor_get(cur, &k, &d, VF_LAST);
	if (at == 0 && k.len == 9 && ((const uint8_t *)k.data)[0] == TIME_PREFIX && d.len == 8)
		memcpy(ns, d.data, 8);
	vf_cursor_close(cur);
out:
	vf_read_end(v->store, txn);
	return rc;
}

int vecfs_export(vecfs *v, int fd, uint64_t *bytes)
{
	vf_txn *txn;
	vf_cursor *cur;
	vf_val k, d;
	size_t cap = (size_t)1 << 20, len = 0, read = 0;
	char *buf = vf_malloc(cap);
	int rc;
	*bytes = 0;
	if (!buf)
		return -ENOMEM;
	if ((rc = vf_read_begin(v->store, &txn))) {
		free(buf);
		return rc;
	}
	if ((rc = vf_cursor_open(txn, v->store->keys, &cur)))
		goto out;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0; rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		uint64_t id;
		vf_val rv;
		vf_record r;
		if (d.len != sizeof id)
			continue;
		memcpy(&id, d.data, sizeof id);
		if ((rc = vf_records_get(txn, v->store, id, &rv)) || (rc = vf_record_decode(rv.data, rv.len, &r)))
			break; /* a damaged record: the export fails (EIO) */
		size_t need = vf_export_line_len(&r);
		if (len + need > cap) {
			if ((rc = vf_write_all(fd, buf, len)))
				break;
			len = 0;
			if (need > cap) {
				char *nb = realloc(buf, need);
				if (!nb) {
					rc = -ENOMEM;
					break;
				}
				buf = nb;
				cap = need;
			}
		}
		len += vf_export_line(buf + len, &r);
		*bytes += need;
		/* a pass over every record: keep few of the store's pages mapped */
		if ((read += rv.len + k.len) >= EXPORT_UNMAP_BYTES) {
			vf_store_unmap_pages(v->store);
			read = 0;
		}
	}
	vf_cursor_close(cur);
	if (rc == -ENOENT)
		rc = vf_write_all(fd, buf, len);
	vf_store_unmap_pages(v->store);
out:
	vf_read_end(v->store, txn);
	free(buf);
	return rc;
}
