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

/* The mode and size of n. */
static int node_mode_size(fs_daemon *dm, node *n, struct stat *st, const vecfs_attrs *sa)
{
	uint64_t size = 0;
	int rc = 0;
	/* The kernel enforces these modes (default_permissions): only the
	 * owner writes anything or reads backup, errors, records/, ingest/
	 * and query/; README, stats, config and generations/ are readable by
	 * all (other users reach them only with allow_other). */
	switch (n->kind) {
	case K_ROOT: case K_GENS:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	case K_INGEST: case K_RECORDS: case K_QUERY: case K_SESSION:
		st->st_mode = S_IFDIR | 0700;
		st->st_nlink = 2;
		return 0;
	case K_GEN:
		if (!gen_exists(dm->store, n->gen))
			return -ENOENT;
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	case K_ACTIVE: {
		uint64_t a = vecfs_active(dm->store);
		char t[32];
		if (!a)
			return -ENOENT;
		st->st_mode = S_IFLNK | 0777;
		st->st_size = snprintf(t, sizeof t, "%llu", (unsigned long long)a);
		return 0;
	}
	case K_TMPLINK:
		st->st_mode = S_IFLNK | 0777;
		st->st_size = (off_t)strlen(n->target);
		return 0;
	case K_DELETE: /* reads empty */
		st->st_mode = S_IFREG | 0600;
		return 0;
	case K_QIN: /* what was written (a read returns it), so that O_APPEND writes append */
		st->st_mode = S_IFREG | 0600;
		st->st_size = (off_t)qs_in_size(n->session->qs);
		return 0;
	case K_INGEST_FILE:
		st->st_mode = S_IFREG | 0200;
		st->st_size = (off_t)ingest_size(n->ing);
		return 0;
	case K_BACKUP: /* what an open now would stream */
		st->st_mode = S_IFREG | 0400;
		st->st_size = (off_t)sa->backup_bytes;
		return 0;
	case K_EXPORT:
		st->st_mode = S_IFREG | 0400;
		st->st_size = (off_t)sa->export_bytes;
		return 0;
	case K_ERRORS:
		st->st_mode = S_IFREG | 0400;
		st->st_size = (off_t)errors_size(&dm->errors, NULL);
		return 0;
	case K_QOUT: case K_QJSON: case K_QSTATS:
		if (n->kind == K_QOUT) /* before the size: see push_out() */
			atomic_store(&n->session->out_attrs, 1);
		st->st_mode = S_IFREG | 0400;
		st->st_size = (off_t)qs_size(n->session->qs,
					     n->kind == K_QOUT ? QS_OUT : n->kind == K_QJSON ? QS_JSON : QS_STATS);
		return 0;
	case K_GCENT: { /* known without rendering it */
		int64_t s = gen_file_size(dm, n->gen, GF_CENTROIDS);
		if (s < 0)
			return (int)s;
		st->st_mode = S_IFREG | 0444;
		st->st_size = s;
		return 0;
	}
	}
	/* README, config, stats, errors, records/KEY, a generation's meta,
	 * clusters and progress: the exact size (kept for each version of the
	 * content that has them: see render.h) */
	rc = render_size(dm, n, &size);
	st->st_mode = S_IFREG | (n->kind == K_CONFIG ? 0644 : n->kind == K_CTL ? 0600
				 : n->kind == K_README || n->kind == K_STATS ? 0444
				 : n->kind == K_GMETA || n->kind == K_GCLUST || n->kind == K_GPROG ? 0444 : 0400);
	st->st_size = (off_t)size;
	/* a record that fails its checksum is there, damaged: reading it fails
	 * with EIO, and rm (or ctl salvage) removes it */
	if (n->kind == K_RECORD && rc == -EIO)
		rc = 0;
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
	uint64_t t = 0, m = sa ? sa->created_ns : dm->mount_ns;
	vecfs_gen_info gi;
	switch (n->kind) {
	case K_ROOT: case K_README: case K_DELETE:
		return sa->created_ns;
	case K_CONFIG:
		return sa->config_ns;
	case K_RECORDS: case K_EXPORT:
		return sa->records_ns;
	case K_RECORD:
		return vecfs_record_time(dm->store, n->name, n->namelen, &t) == 0 ? t : dm->mount_ns;
	case K_GENS: case K_ACTIVE:
		return content_time(dm, n, 0, sa->gens_ns);
	case K_BACKUP: /* every commit changes it: seen by the store's version */
		m = sa->records_ns > sa->config_ns ? sa->records_ns : sa->config_ns;
		return content_time(dm, n, vecfs_snapshot(dm->store), m > sa->gens_ns ? m : sa->gens_ns);
	case K_GEN: case K_GCENT:
		return vecfs_gen_info_get(dm->store, n->gen, &gi) == 0 ? gi.created * 1000000000u : m;
	case K_GMETA: case K_GCLUST: case K_GPROG:
		if (vecfs_gen_info_get(dm->store, n->gen, &gi) == 0)
			m = gi.created * 1000000000u;
		return content_time(dm, n, 0, m);
	case K_ERRORS: /* its last line */
		errors_size(&dm->errors, &t);
		return t ? t : dm->mount_ns;
	case K_QIN: case K_QOUT: case K_QJSON: case K_QSTATS: /* the session's last query */
		return content_time(dm, n->session, 0, dm->mount_ns);
	}
	/* stats, ctl, errors, ingest/ and query/ and what is in them */
	return content_time(dm, n, 0, dm->mount_ns);
}

/* Does n's size or time come from the store's attributes? */
static int needs_store_attrs(int kind)
{
	switch (kind) {
	case K_ROOT: case K_README: case K_DELETE: case K_CONFIG: case K_RECORDS: case K_EXPORT:
	case K_GENS: case K_ACTIVE: case K_BACKUP:
		return 1;
	}
	return 0;
}

int node_attr(fs_daemon *dm, node *n, struct stat *st)
{
	vecfs_attrs sa, *sp = needs_store_attrs(n->kind) ? &sa : NULL;
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
 * out, whose every change push_out() announces, and for the directories
 * whose attributes never change: the kernel checks the modes
 * (default_permissions) of every directory on a path and of the file it
 * opens, and would ask for fresh attributes at each check. */
double attr_timeout(fs_daemon *dm, const node *n)
{
	switch (n->kind) {
	case K_ROOT: case K_INGEST: case K_RECORDS: case K_QUERY: case K_GENS: case K_SESSION:
		return 60.0;
	}
	return out_cached(dm, n) || out_passthrough(n) ? 60.0 : 0;
}

static void reply_entry(fuse_req_t req, node *n, const struct stat *st)
{
	fs_daemon *dm = fuse_req_userdata(req);
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = n->ino;
	e.attr = *st;
	e.attr_timeout = attr_timeout(dm, n);
	/* the fixed names never go away; a query session and its files go only
	 * by rmdir (which drops the kernel's entry); everything else may at any
	 * time */
	switch (n->kind) {
	case K_SESSION: case K_QIN: case K_QOUT: case K_QJSON: case K_QSTATS:
		e.entry_timeout = 60.0;
		break;
	default:
		e.entry_timeout = n->ino <= FIXED_MAX && n->kind != K_ACTIVE ? 60.0 : 0;
	}
	if (fuse_reply_entry(req, &e) != 0) {
		pthread_mutex_lock(&dm->tree.mu);
		if (n->nlookup)
			n->nlookup--;
		maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
	}
}

/* Drop the reference again when the attributes cannot be had. */
void answer_entry_locked(fuse_req_t req, node *n)
{
	fs_daemon *dm = fuse_req_userdata(req);
	struct stat st;
	n->nlookup++;
	pthread_mutex_unlock(&dm->tree.mu);
	int rc = node_attr(dm, n, &st);
	if (rc) {
		pthread_mutex_lock(&dm->tree.mu);
		n->nlookup--;
		maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, -rc);
		return;
	}
	reply_entry(req, n, &st);
}

/* ---------------------------------------------------------------- lookup */

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	int err;
	pthread_mutex_lock(&dm->tree.mu);
	node *p = get_node(dm, parent);
	node *n = p ? child_locked(dm, p, name, &err) : (err = ENOENT, NULL);
	if (!n) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, err);
		return;
	}
	answer_entry_locked(req, n);
}

static void forget_one(fs_daemon *dm, fuse_ino_t ino, uint64_t nlookup)
{
	node *n = get_node(dm, ino);
	if (!n || ino <= FIXED_MAX)
		return;
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	maybe_free(dm, n);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	forget_one(dm, ino, nlookup);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	for (size_t i = 0; i < count; i++)
		forget_one(dm, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_none(req);
}

node *lock_parent(fuse_req_t req, fuse_ino_t parent)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	node *p = get_node(dm, parent);
	if (!p) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
	}
	return p;
}

node *get_locked(fs_daemon *dm, fuse_ino_t ino)
{
	pthread_mutex_lock(&dm->tree.mu);
	node *n = get_node(dm, ino);
	pthread_mutex_unlock(&dm->tree.mu);
	return n;
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)fi;
	struct stat st;
	node *n = get_locked(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = node_attr(dm, n, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, attr_timeout(dm, n));
}
