/*
 * fs/ops_namespace.c - FUSE mkdir, rmdir, unlink, symlink, rename and
 * readlink: query sessions, deletes, generations and the `active` link.
 */
#include "ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "errors.h"
#include "generations.h"
#include "out_cache.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	fs_daemon *dm = fuse_req_userdata(req);
	char t[32];
	pthread_mutex_lock(&dm->tree.mu);
	node *n = get_node(dm, ino);
	char *target = n && n->kind == K_TMPLINK ? strdup(n->target) : NULL;
	pthread_mutex_unlock(&dm->tree.mu);
	if (n && n->kind == K_ACTIVE) {
		uint64_t a = vecfs_active(dm->store);
		if (!a) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		snprintf(t, sizeof t, "%llu", (unsigned long long)a);
		fuse_reply_readlink(req, t);
		return;
	}
	if (!target) {
		fuse_reply_err(req, n && n->kind == K_TMPLINK ? ENOMEM : EINVAL);
		return;
	}
	fuse_reply_readlink(req, target);
	free(target);
}

static int valid_session_id(const char *id)
{
	size_t n = strlen(id);
	if (n < 1 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* mknod(2): no special files anywhere, and the files of ingest/ are made
 * by opening them for writing (a mknod'ed one would have no writer to
 * commit it). */
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)mode;
	(void)rdev;
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	char path[600];
	kind_path(dm, p, path, sizeof path);
	int kind = p->kind;
	pthread_mutex_unlock(&dm->tree.mu);
	const char *sep = kind == K_ROOT ? "" : "/";
	if (kind == K_INGEST)
		errlog(&dm->errors, "mknod %s%s%s: files are made here by opening them for writing "
		       "(cp, >, open)", path, sep, name);
	else
		errlog(&dm->errors, "mknod %s%s%s: no file or node can be made here", path, sep, name);
	fuse_reply_err(req, EPERM);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)mode;
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	if (p->kind != K_QUERY) {
		char path[600];
		kind_path(dm, p, path, sizeof path);
		pthread_mutex_unlock(&dm->tree.mu);
		if (p->kind == K_GENS || p->kind == K_GEN) {
			errlog(&dm->errors, "mkdir %s/%s: generations are made by writing `build` to ctl", path, name);
			fuse_reply_err(req, EACCES);
		} else {
			errlog(&dm->errors, "mkdir %s%s%s: directories can only be made in query/", path,
			       p->kind == K_ROOT ? "" : "/", name);
			fuse_reply_err(req, EPERM);
		}
		return;
	}
	if (!valid_session_id(name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "mkdir query/%s: a session id is 1-64 of A-Z a-z 0-9 . _ -", name);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (find_name(dm, parent, name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (dm->tree.sessions >= dm->max_sessions) {
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "mkdir query/%s: %u query sessions are open, the most there may be "
		       "(-o max_sessions); rmdir some", name, dm->max_sessions);
		fuse_reply_err(req, ENOSPC);
		return;
	}
	node *n = new_node(dm, K_SESSION, parent, name);
	if (n && (n->qs = qs_new(dm, name)) != NULL)
		out_backing_open(dm, n);
	if (!n || !n->qs) {
		if (n)
			maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	link_name(dm, n);
	answer_entry_locked(req, n);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	if (p->kind == K_QUERY) {
		node *n = find_name(dm, parent, name);
		if (!n) {
			pthread_mutex_unlock(&dm->tree.mu);
			fuse_reply_err(req, ENOENT);
			return;
		}
		unlink_name(dm, n);
		if (n->kind == K_SESSION) { /* the session ends, open files or not */
			qs_end(n->qs);
			out_backing_close(dm, n);
		}
		maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, 0);
		return;
	}
	if (p->kind == K_GENS) {
		uint64_t gen;
		node *n = find_name(dm, parent, name);
		pthread_mutex_unlock(&dm->tree.mu);
		if ((n && n->kind == K_TMPLINK) || !strcmp(name, "active")) {
			fuse_reply_err(req, ENOTDIR);
			return;
		}
		if (gen_parse_name(name, &gen)) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		int rc = vecfs_gen_remove(dm->store, gen);
		if (rc == -EBUSY)
			errlog(&dm->errors, "rmdir generations/%s: it is the active generation, or still building", name);
		else if (rc && rc != -ENOENT)
			errlog_err(&dm->errors, rc, "rmdir generations/%s: %s", name, strerror(-rc));
		if (rc == 0) {
			pthread_mutex_lock(&dm->tree.mu);
			n = find_name(dm, parent, name);
			if (n && n->kind == K_GEN) {
				unlink_name(dm, n);
				maybe_free(dm, n);
			}
			pthread_mutex_unlock(&dm->tree.mu);
		}
		fuse_reply_err(req, -rc);
		return;
	}
	char path[600];
	kind_path(dm, p, path, sizeof path);
	pthread_mutex_unlock(&dm->tree.mu);
	if (p->kind == K_ROOT && entry_kind(K_ROOT, name)) {
		errlog(&dm->errors, "rmdir %s: part of the fixed tree", name);
		fuse_reply_err(req, EPERM);
		return;
	}
	fuse_reply_err(req, p->kind == K_RECORDS || p->kind == K_INGEST || p->kind == K_GEN ||
				    p->kind == K_SESSION
			    ? ENOTDIR
			    : ENOENT);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	int pk = p->kind;
	char path[600];
	kind_path(dm, p, path, sizeof path);
	if (pk == K_RECORDS) {
		pthread_mutex_unlock(&dm->tree.mu);
		int rc = vecfs_delete(dm->store, name, strlen(name));
		if (rc && rc != -ENOENT)
			errlog_err(&dm->errors, rc, "rm records/%s: %s", name, strerror(-rc));
		if (rc == 0) {
			pthread_mutex_lock(&dm->tree.mu);
			node *n = find_name(dm, parent, name);
			if (n) {
				unlink_name(dm, n);
				maybe_free(dm, n);
			}
			pthread_mutex_unlock(&dm->tree.mu);
		}
		fuse_reply_err(req, -rc);
		return;
	}
	if (pk == K_INGEST) {
		node *n = find_name(dm, parent, name);
		if (!n) {
			pthread_mutex_unlock(&dm->tree.mu);
			fuse_reply_err(req, ENOENT);
			return;
		}
		unlink_name(dm, n);
		n->opens++; /* keep it while cancelling outside the lock */
		pthread_mutex_unlock(&dm->tree.mu);
		ingest_cancel(n->ing);
		unpin(dm, n);
		fuse_reply_err(req, 0);
		return;
	}
	if (pk == K_GENS) {
		node *n = find_name(dm, parent, name);
		if (n && n->kind == K_TMPLINK) {
			unlink_name(dm, n);
			maybe_free(dm, n);
			pthread_mutex_unlock(&dm->tree.mu);
			fuse_reply_err(req, 0);
			return;
		}
		pthread_mutex_unlock(&dm->tree.mu);
		if (!strcmp(name, "active")) {
			errlog(&dm->errors, "rm generations/active: active cannot be removed; flip it with `ln -sfn GEN generations/active`");
			fuse_reply_err(req, EPERM);
			return;
		}
		uint64_t gen;
		fuse_reply_err(req, !gen_parse_name(name, &gen) && gen_exists(dm->store, gen) ? EISDIR : ENOENT);
		return;
	}
	if (pk == K_SESSION && entry_kind(K_SESSION, name)) {
		/* the files of a session stay; removing one clears the session, so
		 * that `rm -rf query/ID` ends it */
		qsession *q = p->qs;
		p->opens++;
		pthread_mutex_unlock(&dm->tree.mu);
		qs_clear(q);
		push_out(dm, p);
		unpin(dm, p);
		fuse_reply_err(req, 0);
		return;
	}
	pthread_mutex_unlock(&dm->tree.mu);
	if (pk == K_ROOT && !entry_kind(K_ROOT, name)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	errlog(&dm->errors, "rm %s%s%s: cannot be removed", pk == K_ROOT ? "" : path, pk == K_ROOT ? "" : "/", name);
	fuse_reply_err(req, EPERM);
}

#define GEN_LINKS_MAX 256         /* symlinks made in generations/ at once */
#define GEN_LINK_TARGET_MAX 1024  /* bytes of a symlink's target there */

void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	node *p = get_node(dm, parent);
	if (!p || p->kind != K_GENS) {
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "ln -s %s %s: symlinks can only be made in generations/", link, name);
		fuse_reply_err(req, p ? EPERM : ENOENT);
		return;
	}
	uint64_t gen;
	if (!strcmp(name, "active")) {
		pthread_mutex_unlock(&dm->tree.mu);
		if (vecfs_active(dm->store)) {
			fuse_reply_err(req, EEXIST);
			return;
		}
		int rc = gen_activate_target(dm, link, "cannot point to");
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
		pthread_mutex_lock(&dm->tree.mu);
		answer_entry_locked(req, &dm->tree.fixed[K_ACTIVE]);
		return;
	}
	if (find_name(dm, parent, name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (!gen_parse_name(name, &gen)) {
		pthread_mutex_unlock(&dm->tree.mu);
		if (gen_exists(dm->store, gen)) {
			fuse_reply_err(req, EEXIST);
			return;
		}
		errlog(&dm->errors, "ln -s %s generations/%s: numeric names are reserved for generations", link, name);
		fuse_reply_err(req, EPERM);
		return;
	}
	/* links waiting to be renamed onto active are the daemon's memory:
	 * bounded in number and length */
	size_t tlen = strlen(link);
	unsigned waiting = 0;
	for (node *c = dm->tree.children[parent]; c; c = c->sib_next)
		waiting += c->kind == K_TMPLINK;
	if (tlen > GEN_LINK_TARGET_MAX || waiting >= GEN_LINKS_MAX) {
		pthread_mutex_unlock(&dm->tree.mu);
		if (tlen > GEN_LINK_TARGET_MAX)
			errlog(&dm->errors, "ln -s %.40s... generations/%s: the target is %zu bytes, more than %d",
			       link, name, tlen, GEN_LINK_TARGET_MAX);
		else
			errlog(&dm->errors, "ln -s %.40s generations/%s: %u symlinks wait in generations/ "
			       "(rename one onto active or remove some)", link, name, waiting);
		fuse_reply_err(req, tlen > GEN_LINK_TARGET_MAX ? ENAMETOOLONG : ENOSPC);
		return;
	}
	node *n = new_node(dm, K_TMPLINK, parent, name);
	if (n && !(n->target = strdup(link))) {
		maybe_free(dm, n);
		n = NULL;
	}
	if (!n) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	link_name(dm, n);
	answer_entry_locked(req, n);
}

/* mv ingest/NAME.part ingest/NAME (dm->tree.mu held, released here):
 * commits the staged file; the file leaves ingest/ whatever the outcome,
 * but for a bad one renamed with flags (RENAME_NOREPLACE), and by the
 * plain rename after that: coreutils mv renames so, then looks at the
 * source to report the failure (see ingest_rename()). */
static void rename_staged(fuse_req_t req, fs_daemon *dm, fuse_ino_t dir, const char *name,
			  const char *newname, unsigned flags)
{
	node *src = find_name(dm, dir, name);
	size_t len = strlen(newname);
	if (!src) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!ingest_staged(src->ing) || strlen(name) != len + 5 || strncmp(name, newname, len)) {
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "mv ingest/%s ingest/%s: in ingest/ only a staged NAME.part is renamed, "
		       "to NAME, which commits it", name, newname);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (find_name(dm, dir, newname)) {
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "mv ingest/%s ingest/%s: ingest/%s is being written; the staged file "
		       "stays as it was", name, newname, newname);
		fuse_reply_err(req, EBUSY);
		return;
	}
	src->opens++; /* kept while it commits outside the lock */
	pthread_mutex_unlock(&dm->tree.mu);
	fc_request_long(dm->fuse);
	int rc = ingest_rename(src->ing, flags != 0);
	pthread_mutex_lock(&dm->tree.mu);
	src->opens--;
	if (src->linked && ingest_done(src->ing))
		unlink_name(dm, src);
	maybe_free(dm, src);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, -rc);
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	fs_daemon *dm = fuse_req_userdata(req);
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) || (flags & RENAME_EXCHANGE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	pthread_mutex_lock(&dm->tree.mu);
	node *p = get_node(dm, parent), *np = get_node(dm, newparent);
	if (!p || !np) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (p->kind == K_INGEST && np->kind == K_INGEST) {
		rename_staged(req, dm, parent, name, newname, flags);
		return;
	}
	if (p->kind != K_GENS || np->kind != K_GENS) {
		char a[600], b[600];
		kind_path(dm, p, a, sizeof a);
		kind_path(dm, np, b, sizeof b);
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "mv %s/%s %s/%s: only symlinks in generations/ can be renamed (onto active)", a, name,
		       b, newname);
		fuse_reply_err(req, parent != newparent ? EXDEV : EPERM);
		return;
	}
	node *src = find_name(dm, parent, name);
	if (!src || src->kind != K_TMPLINK) {
		pthread_mutex_unlock(&dm->tree.mu);
		uint64_t gen;
		int exists = !strcmp(name, "active") || (!gen_parse_name(name, &gen) && gen_exists(dm->store, gen));
		if (exists)
			errlog(&dm->errors, "mv generations/%s: generations and active cannot be renamed", name);
		fuse_reply_err(req, exists ? EPERM : ENOENT);
		return;
	}
	if (!strcmp(newname, "active")) {
		char *target = strdup(src->target);
		src->opens++;
		pthread_mutex_unlock(&dm->tree.mu);
		if (!target) {
			unpin(dm, src);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		int rc;
		if ((flags & RENAME_NOREPLACE) && vecfs_active(dm->store))
			rc = -EEXIST;
		else
			rc = gen_activate_target(dm, target, "cannot point to");
		free(target);
		pthread_mutex_lock(&dm->tree.mu);
		src->opens--;
		if (rc == 0)
			unlink_name(dm, src);
		maybe_free(dm, src);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, -rc);
		return;
	}
	uint64_t gen;
	if (!gen_parse_name(newname, &gen)) {
		pthread_mutex_unlock(&dm->tree.mu);
		errlog(&dm->errors, "mv generations/%s generations/%s: numeric names are reserved for generations", name,
		       newname);
		fuse_reply_err(req, EPERM);
		return;
	}
	node *dst = find_name(dm, parent, newname);
	if (dst == src) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, 0);
		return;
	}
	if (dst) {
		if (flags & RENAME_NOREPLACE) {
			pthread_mutex_unlock(&dm->tree.mu);
			fuse_reply_err(req, EEXIST);
			return;
		}
		unlink_name(dm, dst);
		maybe_free(dm, dst);
	}
	char *nn = strdup(newname);
	if (!nn) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	unlink_name(dm, src);
	free(src->name);
	src->name = nn;
	src->namelen = strlen(nn);
	link_name(dm, src);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, 0);
}
