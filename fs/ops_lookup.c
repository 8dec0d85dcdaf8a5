/*
 * fs/ops_lookup.c - FUSE lookup, forget and getattr: the entries of the
 * tree and their attributes.
 */
#include "ops.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "errors.h"
#include "generations.h"
#include "out_cache.h"
#include "render.h"

/* The mode (its row's) and size of n. */
static int node_mode_size(fs_daemon *dm, node *n, struct stat *st, const vecfs_attrs *sa)
{
	const fs_kind *k = kind_of(n);
	uint64_t size = 0;
	int rc = 0;
	st->st_mode = k->mode;
	if (S_ISDIR(k->mode))
		st->st_nlink = 2;
	if (k->size)
		rc = k->size(dm, n, sa, &size);
	else if (!S_ISDIR(k->mode))
		/* the exact size (kept for each version of the content that has
		 * them: see render.h) */
		rc = fs_render_size(dm, n, &size);
	st->st_size = (off_t)size;
	return rc;
}

static struct timespec ts_of(uint64_t ns)
{
	return (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
}

/* When n last changed: kept in the store for what the store holds (the
 * records, the configuration, the generations), else seen by the daemon
 * since the mount (what its content was when last rendered: render.c). */
static uint64_t node_time(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	const fs_kind *k = kind_of(n);
	return k->time ? k->time(dm, n, sa) : fs_content_time(dm, n, 0, dm->mount_ns);
}

int fs_node_attr(fs_daemon *dm, node *n, struct stat *st)
{
	vecfs_attrs sa, *sp = kind_of(n)->flags & KF_STORE_ATTRS ? &sa : NULL;
	memset(st, 0, sizeof *st);
	st->st_ino = n->ino;
	st->st_uid = dm->tree.uid;
	st->st_gid = dm->tree.gid;
	st->st_nlink = 1;
	st->st_blksize = 4096;
	int rc = sp ? vecfs_attrs_get(dm->store, sp) : 0;
	if (rc == 0)
		rc = node_mode_size(dm, n, st, sp);
	if (rc == 0) {
		st->st_mtim = st->st_ctim = st->st_atim = ts_of(node_time(dm, n, sp));
		st->st_blocks = (st->st_size + 511) / 512;
	}
	return rc;
}

/* Attributes are computed afresh on every stat (0), but for a session's
 * out, whose every change fs_push_out() announces, and for the directories
 * whose attributes never change: the kernel checks the modes
 * (default_permissions) of every directory on a path and of the file it
 * opens, and would ask for fresh attributes at each check. */
double fs_attr_timeout(fs_daemon *dm, const node *n)
{
	if (kind_of(n)->flags & KF_ATTRS_KEPT)
		return 60.0;
	return fs_out_cached(dm, n) || fs_out_passthrough(n) ? 60.0 : 0;
}

static void reply_entry(fuse_req_t req, node *n, const struct stat *st)
{
	fs_daemon *dm = fuse_req_userdata(req);
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = n->ino;
	e.attr = *st;
	e.attr_timeout = fs_attr_timeout(dm, n);
	/* the fixed names never go away; a query session and its files go only
	 * by rmdir (which drops the kernel's entry); everything else may at any
	 * time */
	e.entry_timeout = kind_of(n)->flags & KF_ENTRY_KEPT ? 60.0 : 0;
	if (fuse_reply_entry(req, &e) != 0) {
		pthread_mutex_lock(&dm->tree.mu);
		if (n->nlookup)
			n->nlookup--;
		fs_maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
	}
}

/* Drop the reference again when the attributes cannot be had. */
void fs_answer_entry_locked(fuse_req_t req, node *n)
{
	fs_daemon *dm = fuse_req_userdata(req);
	struct stat st;
	n->nlookup++;
	pthread_mutex_unlock(&dm->tree.mu);
	int rc = fs_node_attr(dm, n, &st);
	if (rc) {
		pthread_mutex_lock(&dm->tree.mu);
		n->nlookup--;
		fs_maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, -rc);
		return;
	}
	reply_entry(req, n, &st);
}

/* ---------------------------------------------------------------- lookup */

void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	int err;
	pthread_mutex_lock(&dm->tree.mu);
	node *p = fs_get_node(dm, parent);
	node *n = p ? fs_child_locked(dm, p, name, &err) : (err = ENOENT, NULL);
	if (!n) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, err);
		return;
	}
	fs_answer_entry_locked(req, n);
}

static void forget_one(fs_daemon *dm, fuse_ino_t ino, uint64_t nlookup)
{
	node *n = fs_get_node(dm, ino);
	if (!n || ino <= FIXED_MAX)
		return;
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	fs_maybe_free(dm, n);
}

void fs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	forget_one(dm, ino, nlookup);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_none(req);
}

void fs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	for (size_t i = 0; i < count; i++)
		forget_one(dm, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_none(req);
}

node *fs_lock_parent(fuse_req_t req, fuse_ino_t parent)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	node *p = fs_get_node(dm, parent);
	if (!p) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
	}
	return p;
}

node *fs_get_locked(fs_daemon *dm, fuse_ino_t ino)
{
	pthread_mutex_lock(&dm->tree.mu);
	node *n = fs_get_node(dm, ino);
	pthread_mutex_unlock(&dm->tree.mu);
	return n;
}

void fs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)fi;
	struct stat st;
	node *n = fs_get_locked(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = fs_node_attr(dm, n, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, fs_attr_timeout(dm, n));
}
