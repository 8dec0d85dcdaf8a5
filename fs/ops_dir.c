/*
 * fs/ops_dir.c - FUSE opendir, readdir, releasedir and fsyncdir.
 *
 * A directory is listed from a snapshot taken at opendir, but records/,
 * which is read from the store a reply at a time.
 */
#include "ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

typedef struct dent {
	char *name;
	fuse_ino_t ino;
	mode_t type;
} dent;

typedef struct rec_mark {
	uint64_t off;
	size_t len;
	char key[VECFS_KEY_MAX + 1];
} rec_mark;

typedef struct dirh {
	node *n;
	pthread_mutex_t mu;
	dent *ents;
	size_t count, cap;
	/* records/: the entries of the last reply, to resume where the kernel
	 * stopped consuming them */
	rec_mark anchor;   /* the entry before the last reply (off 2 = none) */
	rec_mark *batch;
	size_t nbatch, capbatch;
} dirh;

static int add_dent(void *arg, const char *name, fuse_ino_t ino, mode_t type)
{
	dirh *d = arg;
	if (d->count == d->cap) {
		size_t nc = d->cap ? d->cap * 2 : 16;
		dent *ne = realloc(d->ents, nc * sizeof *ne);
		if (!ne)
			return -ENOMEM;
		d->ents = ne;
		d->cap = nc;
	}
	d->ents[d->count].name = strdup(name);
	if (!d->ents[d->count].name)
		return -ENOMEM;
	d->ents[d->count].ino = ino;
	d->ents[d->count].type = type;
	d->count++;
	return 0;
}

/* The entries of directory d->n as they are now. */
static int snapshot_dir(fs_daemon *dm, dirh *d)
{
	node *n = d->n;
	int rc = 0;
	rc |= add_dent(d, ".", n->ino, S_IFDIR);
	rc |= add_dent(d, "..", n->parent ? n->parent : K_ROOT, S_IFDIR);
	int lrc = kind_of(n)->list(dm, n, add_dent, d);
	return lrc ? lrc : rc ? -ENOMEM : 0;
}

static void dirh_free(dirh *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->count; i++)
		free(d->ents[i].name);
	free(d->ents);
	free(d->batch);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_pin(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = 0;
	dirh *d = NULL;
	if (!S_ISDIR(kind_of(n)->mode))
		rc = -ENOTDIR;
	else if (!(d = calloc(1, sizeof *d)))
		rc = -ENOMEM;
	if (rc == 0) {
		d->n = n;
		pthread_mutex_init(&d->mu, NULL);
		d->anchor.off = 2;
		if (kind_of(n)->list)
			rc = snapshot_dir(dm, d);
	}
	if (rc) {
		dirh_free(d);
		fs_unpin(dm, n);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi) != 0) {
		dirh_free(d);
		fs_unpin(dm, n);
	}
}

typedef struct rd_ctx {
	fuse_req_t req;
	dirh *d;
	char *buf;
	size_t size, used;
	uint64_t off;      /* offset of the last entry added */
	fuse_ino_t parent;
	int full;
} rd_ctx;

static int add_entry(rd_ctx *c, const char *name, fuse_ino_t ino, mode_t type, uint64_t off)
{
	struct stat st;
	memset(&st, 0, sizeof st);
	st.st_ino = ino;
	st.st_mode = type;
	size_t need = fuse_add_direntry(c->req, NULL, 0, name, NULL, 0);
	if (c->used + need > c->size) {
		c->full = 1;
		return 0;
	}
	fuse_add_direntry(c->req, c->buf + c->used, c->size - c->used, name, &st, (off_t)off);
	c->used += need;
	return 1;
}

static int rec_cb(void *arg, const char *key, size_t klen)
{
	rd_ctx *c = arg;
	char name[VECFS_KEY_MAX + 1];
	if (klen > VECFS_KEY_MAX)
		return 0;
	memcpy(name, key, klen);
	name[klen] = 0;
	if (!add_entry(c, name, fs_listed_ino(key, klen, c->parent), S_IFREG, c->off + 1))
		return 1;
	c->off++;
	dirh *d = c->d;
	if (d->nbatch == d->capbatch) {
		size_t nc = d->capbatch ? d->capbatch * 2 : 64;
		rec_mark *nb = realloc(d->batch, nc * sizeof *nb);
		if (!nb)
			return 1;
		d->batch = nb;
		d->capbatch = nc;
	}
	rec_mark *m = &d->batch[d->nbatch++];
	m->off = c->off;
	m->len = klen;
	memcpy(m->key, key, klen);
	return 0;
}

typedef struct skip_ctx {
	uint64_t left;
	rec_mark *m;
} skip_ctx;

static int skip_cb(void *arg, const char *key, size_t klen)
{
	skip_ctx *s = arg;
	if (klen > VECFS_KEY_MAX)
		return 0;
	memcpy(s->m->key, key, klen);
	s->m->len = klen;
	return --s->left == 0;
}

static void readdir_records(fuse_req_t req, dirh *d, rd_ctx *c, uint64_t off)
{
	fs_daemon *dm = fuse_req_userdata(req);
	/* offsets: "." 1, ".." 2, the i-th key (from 0) 3 + i */
	rec_mark start;
	int rc = 0;
	c->parent = d->n->ino;
	if (off < 1 && !add_entry(c, ".", d->n->ino, S_IFDIR, 1))
		return;
	if (off < 2 && !add_entry(c, "..", K_ROOT, S_IFDIR, 2))
		return;
	if (off <= 2) {
		start.off = 2;
		start.len = 0;
	} else if (off == d->anchor.off) {
		start = d->anchor;
	} else {
		size_t i;
		for (i = 0; i < d->nbatch; i++)
			if (d->batch[i].off == off)
				break;
		if (i < d->nbatch) {
			start = d->batch[i];
		} else {
			/* a seek elsewhere: count keys from the start */
			skip_ctx s = {off - 2, &start};
			start.len = 0;
			rc = vecfs_keys(dm->store, NULL, 0, (size_t)-1, skip_cb, &s);
			if (rc < 0 || s.left) {
				c->used = 0; /* past the end */
				return;
			}
			start.off = off;
		}
	}
	d->anchor = start;
	d->nbatch = 0;
	c->off = start.off;
	rc = vecfs_keys(dm->store, start.off > 2 ? start.key : NULL, start.off > 2 ? start.len : 0,
			(size_t)-1, rec_cb, c);
	if (rc < 0 && c->used == 0) {
		fuse_reply_err(req, -rc);
		c->full = -1; /* answered */
	}
}

void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)ino;
	dirh *d = (dirh *)(uintptr_t)fi->fh;
	rd_ctx c;
	memset(&c, 0, sizeof c);
	c.req = req;
	c.d = d;
	c.size = size;
	c.buf = malloc(size ? size : 1);
	if (!c.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&d->mu);
	if (!kind_of(d->n)->list) {
		readdir_records(req, d, &c, (uint64_t)off);
	} else {
		for (size_t i = (size_t)off; i < d->count; i++)
			if (!add_entry(&c, d->ents[i].name, d->ents[i].ino, d->ents[i].type, i + 1))
				break;
	}
	pthread_mutex_unlock(&d->mu);
	if (c.full != -1)
		fuse_reply_buf(req, c.buf, c.used);
	free(c.buf);
}

void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)ino;
	dirh *d = (dirh *)(uintptr_t)fi->fh;
	node *n = d->n;
	dirh_free(d);
	fs_unpin(dm, n);
	fuse_reply_err(req, 0);
}

void fs_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	fuse_reply_err(req, 0);
}
