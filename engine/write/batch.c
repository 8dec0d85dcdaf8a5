/*
 * engine/write/batch.c - large writes: rows spooled, encoded, into an unlinked
 * temporary file next to the store, then committed at once by vecfs_put
 * (or vecfs_delete_many) over the mapped file, or dropped.
 */
#include "io.h"
#include "write.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SPOOL_PREFIX ".vecfs-spool."

struct vecfs_batch {
	vecfs *v;
	uint32_t dim;
	unsigned flags;
	vecfs_config cfg;
	int fd;             /* the spool file; -1 until the first row */
	int fail_rc;        /* a failed write of the spool: every later call fails */
	int keyed;          /* some row has a key or a payload */
	char *wbuf;         /* the write buffer, of the handle's spool_bytes */
	size_t wlen;
	uint64_t fsize;     /* bytes in the file (without wbuf) */
	uint64_t rows;
	char *filter;
	size_t filter_len;
	int has_filter;
};

/* A spooled row: this header, its key, its payload, zeros to a multiple of
 * 4, its vector, zeros to a multiple of 8.  At commit the row array
 * vecfs_put takes is built in the mapped file behind the records. */
typedef struct rec_hdr {
	uint64_t tag;
	uint32_t klen, plen;
	uint32_t haskey, pad;
} rec_hdr;

static size_t rec_size(size_t klen, size_t plen, uint32_t dim)
{
	size_t s = sizeof(rec_hdr) + klen + plen;
	s = (s + 3) & ~(size_t)3;
	s += sizeof(float) * dim;
	return (s + 7) & ~(size_t)7;
}

/* An unlinked temporary file in dir; -errno on failure. */
static int tmpfile_in(const char *dir)
{
	int fd = -1;
#ifdef O_TMPFILE
	fd = vf_io_ops.open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
#endif
	char path[4200];
	snprintf(path, sizeof path, "%s/" SPOOL_PREFIX "XXXXXX", dir);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(path);
	return fd;
}

void vf_batch_sweep(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, SPOOL_PREFIX, sizeof SPOOL_PREFIX - 1))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

static int io_rc(int rc)
{
	return rc == -EDQUOT ? -ENOSPC : rc;
}

/* The spool file and its buffer, made at the first row: next to the store
 * (its disk has room for the rows), else in TMPDIR. */
static int spool_start(vecfs_batch *b)
{
	if (b->fd >= 0)
		return 0;
	int fd = tmpfile_in(b->v->store->dir);
	if (fd < 0) {
		const char *td = getenv("TMPDIR");
		int fd2 = tmpfile_in(td && td[0] ? td : "/tmp");
		if (fd2 < 0)
			return io_rc(fd);
		fd = fd2;
	}
	b->wbuf = vf_malloc(b->v->spool_bytes);
	if (!b->wbuf) {
		close(fd);
		return -ENOMEM;
	}
	b->fd = fd;
	return 0;
}

static int spool_flush(vecfs_batch *b)
{
	size_t off = 0;
	while (off < b->wlen) {
		ssize_t w = pwrite(b->fd, b->wbuf + off, b->wlen - off, (off_t)(b->fsize + off));
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return io_rc(-errno);
		}
		off += (size_t)w;
	}
	b->fsize += b->wlen;
	b->wlen = 0;
	return 0;
}

static int spool_put(vecfs_batch *b, const void *p, size_t n)
{
	while (n) {
		if (b->wlen == b->v->spool_bytes) {
			int rc = spool_flush(b);
			if (rc)
				return rc;
		}
		size_t take = b->v->spool_bytes - b->wlen;
		if (take > n)
			take = n;
		memcpy(b->wbuf + b->wlen, p, take);
		b->wlen += take;
		p = (const char *)p + take;
		n -= take;
	}
	return 0;
}

static int spool_row(vecfs_batch *b, const vecfs_row *r, uint64_t tag)
{
	static const char zeros[8];
	/* a delete batch keeps a row's key only (index_rows() reads keys) */
	size_t klen = r->key ? r->keylen : 0;
	size_t plen = b->flags & VECFS_BATCH_DELETE ? 0 : r->payload_len;
	size_t vbytes = sizeof(float) * b->dim;
	rec_hdr h = {tag, (uint32_t)klen, (uint32_t)plen, r->key != NULL, 0};
	size_t head = sizeof h + klen + plen, at = (head + 3) & ~(size_t)3;
	size_t total = rec_size(klen, plen, b->dim);
	int rc;
	if ((rc = spool_start(b)) || (rc = spool_put(b, &h, sizeof h)) ||
	    (rc = spool_put(b, r->key, klen)) || (rc = spool_put(b, r->payload, plen)) ||
	    (rc = spool_put(b, zeros, at - head)) || (rc = spool_put(b, r->vec, vbytes)) ||
	    (rc = spool_put(b, zeros, total - at - vbytes)))
		return rc;
	b->keyed |= klen || plen;
	return 0;
}

int vecfs_batch_begin(vecfs *v, uint32_t dim, unsigned flags, vecfs_batch **out)
{
	int del = (flags & VECFS_BATCH_DELETE) != 0;
	if (del ? dim != 0 : dim == 0 || dim > VECFS_DIM_MAX)
		return -EINVAL;
	vecfs_batch *b = vf_calloc(1, sizeof *b);
	int rc;
	if (!b)
		return -ENOMEM;
	if ((rc = vecfs_config_get(v, &b->cfg))) {
		free(b);
		return rc;
	}
	b->v = v;
	b->dim = dim;
	b->flags = flags;
	b->fd = -1;
	*out = b;
	return 0;
}

uint64_t vecfs_batch_rows(const vecfs_batch *b)
{
	return b->rows;
}

int vecfs_batch_add(vecfs_batch *b, const vecfs_row *rows, const uint64_t *tags, size_t n,
		    size_t *bad_row, char *err, size_t errlen)
{
	int rc;
	if (b->fail_rc)
		return b->fail_rc;
	for (size_t i = 0; i < n; i++) {
		if (b->flags & VECFS_BATCH_DELETE) {
			if (!rows[i].key || !vecfs_key_valid(rows[i].key, rows[i].keylen)) {
				if (bad_row)
					*bad_row = i;
				vf_seterr(err, errlen, "row %llu: not a key",
					  (unsigned long long)b->rows + 1);
				return -EINVAL;
			}
		} else if ((rc = vf_row_check_at(&b->cfg, rows, i, b->dim, b->rows + 1, bad_row,
						 err, errlen))) {
			return rc;
		}
		if ((rc = spool_row(b, &rows[i], tags ? tags[i] : b->rows + 1))) {
			vf_seterr(err, errlen, "cannot spool the row: %s", strerror(-rc));
			return b->fail_rc = rc;
		}
		b->rows++;
	}
	return 0;
}

int vecfs_batch_filter(vecfs_batch *b, const char *filter, size_t len)
{
	if (!(b->flags & VECFS_BATCH_DELETE))
		return -EINVAL;
	char *f = vf_malloc(len + 1);
	if (!f)
		return -ENOMEM;
	if (len)
		memcpy(f, filter, len);
	f[len] = 0;
	free(b->filter);
	b->filter = f;
	b->filter_len = len;
	b->has_filter = 1;
	return 0;
}

/* The rows (or keys) of the mapped spool, in an array of `each` bytes an
 * entry behind the records, at map + b->fsize. */
static void index_rows(const vecfs_batch *b, char *map)
{
	size_t off = 0;
	if (b->flags & VECFS_BATCH_DELETE) {
		vecfs_key *keys = (vecfs_key *)(void *)(map + b->fsize);
		for (uint64_t i = 0; i < b->rows; i++) {
			rec_hdr h;
			memcpy(&h, map + off, sizeof h);
			keys[i] = (vecfs_key){map + off + sizeof h, h.klen};
			off += rec_size(h.klen, 0, 0);
		}
		return;
	}
	vecfs_row *rows = (vecfs_row *)(void *)(map + b->fsize);
	if (!b->keyed) {
		/* rows with neither key nor payload are all the same size:
		 * their headers need no reading (a cache miss a row) */
		size_t stride = rec_size(0, 0, b->dim), vec_at = (sizeof(rec_hdr) + 3) & ~(size_t)3;
		for (uint64_t i = 0; i < b->rows; i++, off += stride)
			rows[i] = (vecfs_row){NULL, 0, (const float *)(const void *)(map + off + vec_at),
					      NULL, 0};
		return;
	}
	for (uint64_t i = 0; i < b->rows; i++) {
		rec_hdr h;
		memcpy(&h, map + off, sizeof h);
		const char *k = map + off + sizeof h;
		size_t head = sizeof h + h.klen + h.plen;
		rows[i] = (vecfs_row){h.haskey ? k : NULL, h.klen,
				      (const float *)(const void *)(map + off + ((head + 3) & ~(size_t)3)),
				      h.plen ? k + h.klen : NULL, h.plen};
		off += rec_size(h.klen, h.plen, b->dim);
	}
}

/* The tags of rows bad and first (each (size_t)-1 for none). */
static void tags_of(const vecfs_batch *b, const char *map, size_t bad, size_t first,
		    vecfs_batch_result *res)
{
	size_t off = 0;
	for (size_t i = 0; i < b->rows && (i <= bad || i <= first); i++) {
		rec_hdr h;
		memcpy(&h, map + off, sizeof h);
		if (i == bad)
			res->row = h.tag;
		if (i == first)
			res->first = h.tag;
		off += rec_size(h.klen, h.plen, b->dim);
	}
}

static void batch_free(vecfs_batch *b)
{
	if (b->fd >= 0)
		close(b->fd);
	free(b->wbuf);
	free(b->filter);
	free(b);
}

/* Map the spool and commit its rows.  The row array's pages are allocated
 * (posix_fallocate) before the mapping stores into them: on a full disk
 * the commit fails with ENOSPC instead of a SIGBUS.  The mapping is
 * shared: its pages stay page cache, not the process's own memory. */
static int batch_commit(vecfs_batch *b, vecfs_batch_result *res, char *err, size_t errlen)
{
	int del = (b->flags & VECFS_BATCH_DELETE) != 0;
	int rc;
	if (b->fail_rc) {
		vf_seterr(err, errlen, "cannot spool the rows: %s", strerror(-b->fail_rc));
		return b->fail_rc;
	}
	if (b->rows == 0 && !(del && b->has_filter))
		return 0;
	char *map = NULL;
	size_t total = 0;
	if (b->rows) {
		if ((rc = spool_flush(b))) {
			vf_seterr(err, errlen, "cannot spool the rows: %s", strerror(-rc));
			return rc;
		}
		size_t each = del ? sizeof(vecfs_key) : sizeof(vecfs_row);
		total = (size_t)b->fsize + (size_t)b->rows * each;
		if ((rc = posix_fallocate(b->fd, (off_t)b->fsize, (off_t)(total - b->fsize))) != 0) {
			rc = io_rc(-rc);
			vf_seterr(err, errlen, "cannot spool the rows: %s", strerror(-rc));
			return rc;
		}
		map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, b->fd, 0);
		if (map == MAP_FAILED) {
			rc = -errno;
			vf_seterr(err, errlen, "cannot map the spooled rows: %s", strerror(-rc));
			return rc;
		}
		index_rows(b, map);
	}
	size_t bad = (size_t)-1, first = (size_t)-1;
	if (del) {
		rc = vecfs_delete_many(b->v, map ? (const vecfs_key *)(const void *)(map + b->fsize) : NULL,
				       b->rows, b->has_filter ? b->filter : NULL, b->filter_len,
				       &res->deleted, err, errlen);
	} else {
		const vecfs_row *rows = (const vecfs_row *)(const void *)(map + b->fsize);
		if (b->flags & VECFS_BATCH_UNIQUE)
			rc = vecfs_put_unique(b->v, rows, b->rows, b->dim, &bad, &first, err, errlen);
		else
			rc = vecfs_put(b->v, rows, b->rows, b->dim, &bad, err, errlen);
		if (rc && bad < b->rows) {
			tags_of(b, map, bad, first, res);
			if (first < b->rows) {
				res->keylen = rows[bad].keylen;
				memcpy(res->key, rows[bad].key, res->keylen);
				res->key[res->keylen] = 0;
				vf_seterr(err, errlen, "key '%.*s' given twice, rows %llu and %llu",
					  (int)res->keylen, res->key, (unsigned long long)res->first,
					  (unsigned long long)res->row);
			}
		}
	}
	if (map)
		munmap(map, total);
	return rc;
}

int vecfs_batch_commit(vecfs_batch *b, vecfs_batch_result *res, char *err, size_t errlen)
{
	vecfs_batch_result own;
	if (!res)
		res = &own;
	memset(res, 0, sizeof *res);
	int rc = batch_commit(b, res, err, errlen);
	batch_free(b);
	return rc;
}

void vecfs_batch_abort(vecfs_batch *b)
{
	if (b)
		batch_free(b);
}
