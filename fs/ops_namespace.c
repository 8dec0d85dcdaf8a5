/*
 * fs/ops_namespace.c - FUSE mknod, mkdir, rmdir, unlink, symlink, rename
 * and readlink, and the directory operations of each kind (kind_dir_ops,
 * ops.h): query sessions, deletes, generations and the `active` link.
 * Each operation calls the handler of its directory's row (readlink: of
 * the link's); a directory without one refuses it as below.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
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

void fs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_get_locked(dm, ino);
	int (*target_of)(fs_daemon *, node *, char **) = n ? kind_of(n)->readlink : NULL;
	char *target = NULL;
	int rc = target_of ? target_of(dm, n, &target) : -EINVAL;
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_readlink(req, target);
	free(target);
}

int fs_dir_refuse(fuse_req_t req, node *p, const char *verb, const char *root, const char *name, int err,
	       const char *why)
{
	fs_daemon *dm = fuse_req_userdata(req);
	char path[600];
	int in_root = p->ino == K_ROOT;
	if (!in_root)
		fs_kind_path(dm, p, path, sizeof path);
	pthread_mutex_unlock(&dm->tree.mu);
	fs_errlog(&dm->errors, "%s%s%s%s%s: %s", verb, *verb ? " " : "", in_root ? root : path, in_root ? "" : "/",
	       name, why);
	return err;
}

/* mknod(2): no special files anywhere, and no files either: a directory
 * that takes files makes them at their open for writing. */
void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)mode;
	(void)rdev;
	node *p = fs_lock_parent(req, parent);
	if (!p)
		return;
	void (*f)(fuse_req_t, node *, const char *) = DIR_OP(p, mknod);
	if (f) {
		f(req, p, name);
		return;
	}
	fuse_reply_err(req, fs_dir_refuse(req, p, "mknod", "/", name, EPERM, "no file or node can be made here"));
}

void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)mode;
	node *p = fs_lock_parent(req, parent);
	if (!p)
		return;
	void (*f)(fuse_req_t, node *, const char *) = DIR_OP(p, mkdir);
	if (f) {
		f(req, p, name);
		return;
	}
	fuse_reply_err(req, fs_dir_refuse(req, p, "mkdir", "/", name, EPERM, "directories can only be made in query/"));
}

/* A directory whose entries are not directories answers ENOTDIR. */
void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *p = fs_lock_parent(req, parent);
	if (!p)
		return;
	void (*f)(fuse_req_t, node *, const char *) = DIR_OP(p, rmdir);
	if (f) {
		f(req, p, name);
		return;
	}
	int dir = S_ISDIR(kind_of(p)->mode);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, dir ? ENOTDIR : ENOENT);
}

/* rm of what cannot be removed (dm->tree.mu held, released here). */
static void unlink_refused(fuse_req_t req, node *p, const char *name)
{
	fuse_reply_err(req, fs_dir_refuse(req, p, "rm", "", name, EPERM, "cannot be removed"));
}

void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	node *p = fs_lock_parent(req, parent);
	if (!p)
		return;
	void (*f)(fuse_req_t, node *, const char *) = DIR_OP(p, unlink);
	if (f)
		f(req, p, name);
	else
		unlink_refused(req, p, name);
}

void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	pthread_mutex_lock(&dm->tree.mu);
	node *p = fs_get_node(dm, parent);
	void (*f)(fuse_req_t, node *, const char *, const char *) = p ? DIR_OP(p, symlink) : NULL;
	if (f) {
		f(req, p, link, name);
		return;
	}
	pthread_mutex_unlock(&dm->tree.mu);
	fs_errlog(&dm->errors, "ln -s %s %s: symlinks can only be made in generations/", link, name);
	fuse_reply_err(req, p ? EPERM : ENOENT);
}

void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	fs_daemon *dm = fuse_req_userdata(req);
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) || (flags & RENAME_EXCHANGE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	pthread_mutex_lock(&dm->tree.mu);
	node *p = fs_get_node(dm, parent), *np = fs_get_node(dm, newparent);
	if (!p || !np) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	void (*f)(fuse_req_t, node *, const char *, node *, const char *, unsigned) =
		p->kind == np->kind ? DIR_OP(p, rename) : NULL;
	if (f) {
		f(req, p, name, np, newname, flags);
		return;
	}
	char a[600], b[600];
	fs_kind_path(dm, p, a, sizeof a);
	fs_kind_path(dm, np, b, sizeof b);
	pthread_mutex_unlock(&dm->tree.mu);
	fs_errlog(&dm->errors, "mv %s/%s %s/%s: only symlinks in generations/ can be renamed (onto active)", a, name,
	       b, newname);
	fuse_reply_err(req, parent != newparent ? EXDEV : EPERM);
}

/* ---------------------------------------------------------------- the directory operations of each kind
 *
 * Each called with dm->tree.mu held and p the directory, and each releases
 * it (kind_dir_ops, ops.h); named in the rows of kinds.c. */

/* ---------------------------------------------------------------- the root */

static void rmdir_root(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	if (fs_entry_kind(p->kind, name)) {
		fuse_reply_err(req, fs_dir_refuse(req, p, "rmdir", "", name, EPERM, "part of the fixed tree"));
		return;
	}
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, ENOENT);
}

/* Its fixed entries cannot be removed; there is nothing else. */
static void unlink_root(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	if (fs_entry_kind(p->kind, name)) {
		unlink_refused(req, p, name);
		return;
	}
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, ENOENT);
}

const kind_dir_ops fs_root_dir_ops = {
	.rmdir = rmdir_root,
	.unlink = unlink_root,
};

/* ---------------------------------------------------------------- ingest/ */

/* The files of ingest/ are made by opening them for writing (a mknod'ed
 * one would have no writer to commit it). */
static void mknod_ingest(fuse_req_t req, node *p, const char *name)
{
	fuse_reply_err(req, fs_dir_refuse(req, p, "mknod", "/", name, EPERM,
				       "files are made here by opening them for writing (cp, >, open)"));
}

/* An ingest file: made by its first writer, joined by the next writers of a
 * staged NAME.part. */
static node *create_ingest(fuse_req_t req, node *p, const char *name, int flags, int *err)
{
	fs_daemon *dm = fuse_req_userdata(req);
	int fmt = fs_ingest_format_staged(name);
	if (fmt < 0) {
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "ingest/%s: unknown file type: the name must end in .csv, .tsv, .txt, .jsonl, .ndjson, .fvecs, .bvecs or .npy (then .part for a staged file)",
		       name);
		*err = EINVAL;
		return NULL;
	}
	node *n = fs_find_name(dm, p->ino, name);
	if (n && (flags & O_EXCL)) {
		pthread_mutex_unlock(&dm->tree.mu);
		*err = EEXIST;
		return NULL;
	}
	if (n && fs_ingest_done(n->ing)) {
		fs_unlink_name(dm, n); /* committed, and about to leave */
		n = NULL;
	}
	if (n && !fs_ingest_is_staged(name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		*err = -fs_ingest_busy(dm, name);
		return NULL;
	}
	if (!n) {
		n = fs_new_node(dm, K_INGEST_FILE, p->ino, name);
		if (n && !(n->ing = fs_ingest_new(dm, name, fmt, (uint64_t)fuse_req_ctx(req)->pid))) {
			fs_maybe_free(dm, n);
			n = NULL;
		}
		if (!n) {
			pthread_mutex_unlock(&dm->tree.mu);
			*err = ENOMEM;
			return NULL;
		}
		fs_link_name(dm, n);
	}
	return n;
}

/* rm ingest/NAME cancels it. */
static void unlink_ingest(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_find_name(dm, p->ino, name);
	if (!n) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	fs_unlink_name(dm, n);
	n->opens++; /* keep it while cancelling outside the lock */
	pthread_mutex_unlock(&dm->tree.mu);
	fs_ingest_cancel(n->ing);
	fs_unpin(dm, n);
	fuse_reply_err(req, 0);
}

/* mv ingest/NAME.part ingest/NAME: commits the staged file; the file
 * leaves ingest/ whatever the outcome, but for a bad one renamed with flags
 * (RENAME_NOREPLACE), and by the plain rename after that: coreutils mv
 * renames so, then looks at the source to report the failure (see
 * fs_ingest_rename()). */
static void rename_ingest(fuse_req_t req, node *p, const char *name, node *np, const char *newname,
			  unsigned flags)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *src = fs_find_name(dm, p->ino, name);
	size_t len = strlen(newname);
	(void)np; /* ingest/ itself */
	if (!src) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!fs_ingest_staged(src->ing) || strlen(name) != len + 5 || strncmp(name, newname, len)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "mv ingest/%s ingest/%s: in ingest/ only a staged NAME.part is renamed, "
		       "to NAME, which commits it", name, newname);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (fs_find_name(dm, p->ino, newname)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "mv ingest/%s ingest/%s: ingest/%s is being written; the staged file "
		       "stays as it was", name, newname, newname);
		fuse_reply_err(req, EBUSY);
		return;
	}
	src->opens++; /* kept while it commits outside the lock */
	pthread_mutex_unlock(&dm->tree.mu);
	fs_fc_request_long(dm->fuse);
	int rc = fs_ingest_rename(src->ing, flags != 0);
	pthread_mutex_lock(&dm->tree.mu);
	src->opens--;
	if (src->linked && fs_ingest_done(src->ing))
		fs_unlink_name(dm, src);
	fs_maybe_free(dm, src);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, -rc);
}

const kind_dir_ops fs_ingest_dir_ops = {
	.create = create_ingest,
	.mknod = mknod_ingest,
	.unlink = unlink_ingest,
	.rename = rename_ingest,
};

/* ---------------------------------------------------------------- records/ */

static node *create_records(fuse_req_t req, node *p, const char *name, int flags, int *err)
{
	(void)flags;
	*err = fs_dir_refuse(req, p, "", "", name, EPERM, "records are made by writing files into ingest/");
	return NULL;
}

/* rm records/KEY deletes the record. */
static void unlink_record(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	fuse_ino_t dir = p->ino;
	pthread_mutex_unlock(&dm->tree.mu);
	int rc = vecfs_delete(dm->store, name, strlen(name));
	if (rc && rc != -ENOENT)
		fs_errlog_err(&dm->errors, rc, "rm records/%s: %s", name, strerror(-rc));
	if (rc == 0) {
		pthread_mutex_lock(&dm->tree.mu);
		node *n = fs_find_name(dm, dir, name);
		if (n) {
			fs_unlink_name(dm, n);
			fs_maybe_free(dm, n);
		}
		pthread_mutex_unlock(&dm->tree.mu);
	}
	fuse_reply_err(req, -rc);
}

const kind_dir_ops fs_records_dir_ops = {
	.create = create_records,
	.unlink = unlink_record,
};

/* ---------------------------------------------------------------- query/ */

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

static node *create_query(fuse_req_t req, node *p, const char *name, int flags, int *err)
{
	(void)flags;
	*err = fs_dir_refuse(req, p, "", "", name, EPERM, "make a session with mkdir query/ID");
	return NULL;
}

/* mkdir query/ID opens a session. */
static void mkdir_session(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	if (!valid_session_id(name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "mkdir query/%s: a session id is 1-64 of A-Z a-z 0-9 . _ -", name);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (fs_find_name(dm, p->ino, name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (dm->tree.sessions >= dm->max_sessions) {
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "mkdir query/%s: %u query sessions are open, the most there may be "
		       "(-o max_sessions); rmdir some", name, dm->max_sessions);
		fuse_reply_err(req, ENOSPC);
		return;
	}
	node *n = fs_new_node(dm, K_SESSION, p->ino, name);
	if (n && (n->qs = fs_qs_new(dm, name)) != NULL)
		fs_out_backing_open(dm, n);
	if (!n || !n->qs) {
		if (n)
			fs_maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fs_link_name(dm, n);
	fs_answer_entry_locked(req, n);
}

/* rmdir query/ID ends the session, open files or not. */
static void rmdir_session(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_find_name(dm, p->ino, name);
	if (!n) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	fs_unlink_name(dm, n);
	if (n->kind == K_SESSION) {
		fs_qs_end(n->qs);
		fs_out_backing_close(dm, n);
	}
	fs_maybe_free(dm, n);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, 0);
}

const kind_dir_ops fs_query_dir_ops = {
	.create = create_query,
	.mkdir = mkdir_session,
	.rmdir = rmdir_session,
};

/* query/ID/in: made by create as it is looked up; a session holds no
 * other files. */
static node *create_session_file(fuse_req_t req, node *p, const char *name, int flags, int *err)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)flags;
	if (fs_entry_kind(p->kind, name) == K_QIN) {
		node *n = fs_child_locked(dm, p, name, err);
		if (!n)
			pthread_mutex_unlock(&dm->tree.mu);
		return n;
	}
	*err = fs_dir_refuse(req, p, "", "", name, EPERM, "a session holds only in, out, out.json and stats");
	return NULL;
}

/* The files of a session stay; removing one clears the session, so that
 * `rm -rf query/ID` ends it. */
static void unlink_session_file(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	if (!fs_entry_kind(p->kind, name)) {
		unlink_refused(req, p, name);
		return;
	}
	qsession *q = p->qs;
	p->opens++;
	pthread_mutex_unlock(&dm->tree.mu);
	fs_qs_clear(q);
	fs_push_out(dm, p);
	fs_unpin(dm, p);
	fuse_reply_err(req, 0);
}

const kind_dir_ops fs_session_dir_ops = {
	.create = create_session_file,
	.unlink = unlink_session_file,
};

/* ---------------------------------------------------------------- generations/ */

/* generations/ and each generation are made by the library (ctl build). */
static node *create_gens(fuse_req_t req, node *p, const char *name, int flags, int *err)
{
	(void)flags;
	*err = fs_dir_refuse(req, p, "", "", name, EACCES, "generations are read-only");
	return NULL;
}

static void mkdir_gens(fuse_req_t req, node *p, const char *name)
{
	fuse_reply_err(req, fs_dir_refuse(req, p, "mkdir", "/", name, EACCES,
				       "generations are made by writing `build` to ctl"));
}

/* rmdir generations/GEN removes the generation. */
static void rmdir_gen(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	fuse_ino_t dir = p->ino;
	uint64_t gen;
	node *n = fs_find_name(dm, dir, name);
	pthread_mutex_unlock(&dm->tree.mu);
	if ((n && n->kind == K_TMPLINK) || !strcmp(name, "active")) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (fs_gen_parse_name(name, &gen)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = vecfs_gen_remove(dm->store, gen);
	if (rc == -EBUSY)
		fs_errlog(&dm->errors, "rmdir generations/%s: it is the active generation, or still building", name);
	else if (rc && rc != -ENOENT)
		fs_errlog_err(&dm->errors, rc, "rmdir generations/%s: %s", name, strerror(-rc));
	if (rc == 0) {
		pthread_mutex_lock(&dm->tree.mu);
		n = fs_find_name(dm, dir, name);
		if (n && n->kind == K_GEN) {
			fs_unlink_name(dm, n);
			fs_maybe_free(dm, n);
		}
		pthread_mutex_unlock(&dm->tree.mu);
	}
	fuse_reply_err(req, -rc);
}

/* rm of a symlink made while flipping active; active and the generations
 * are not removed so. */
static void unlink_gens(fuse_req_t req, node *p, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_find_name(dm, p->ino, name);
	if (n && n->kind == K_TMPLINK) {
		fs_unlink_name(dm, n);
		fs_maybe_free(dm, n);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, 0);
		return;
	}
	pthread_mutex_unlock(&dm->tree.mu);
	if (!strcmp(name, "active")) {
		fs_errlog(&dm->errors, "rm generations/active: active cannot be removed; flip it with `ln -sfn GEN generations/active`");
		fuse_reply_err(req, EPERM);
		return;
	}
	uint64_t gen;
	fuse_reply_err(req, !fs_gen_parse_name(name, &gen) && fs_gen_exists(dm->store, gen) ? EISDIR : ENOENT);
}

#define GEN_LINKS_MAX 256         /* symlinks made in generations/ at once */
#define GEN_LINK_TARGET_MAX 1024  /* bytes of a symlink's target there */

/* ln -s GEN generations/active activates GEN while none is active; any
 * other name not a generation's makes a symlink to rename onto active. */
static void symlink_gens(fuse_req_t req, node *p, const char *link, const char *name)
{
	fs_daemon *dm = fuse_req_userdata(req);
	fuse_ino_t parent = p->ino;
	uint64_t gen;
	if (!strcmp(name, "active")) {
		pthread_mutex_unlock(&dm->tree.mu);
		if (vecfs_active(dm->store)) {
			fuse_reply_err(req, EEXIST);
			return;
		}
		int rc = fs_gen_activate_target(dm, link, "cannot point to");
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
		pthread_mutex_lock(&dm->tree.mu);
		fs_answer_entry_locked(req, &dm->tree.fixed[K_ACTIVE]);
		return;
	}
	if (fs_find_name(dm, parent, name)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (!fs_gen_parse_name(name, &gen)) {
		pthread_mutex_unlock(&dm->tree.mu);
		if (fs_gen_exists(dm->store, gen)) {
			fuse_reply_err(req, EEXIST);
			return;
		}
		fs_errlog(&dm->errors, "ln -s %s generations/%s: numeric names are reserved for generations", link, name);
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
			fs_errlog(&dm->errors, "ln -s %.40s... generations/%s: the target is %zu bytes, more than %d",
			       link, name, tlen, GEN_LINK_TARGET_MAX);
		else
			fs_errlog(&dm->errors, "ln -s %.40s generations/%s: %u symlinks wait in generations/ "
			       "(rename one onto active or remove some)", link, name, waiting);
		fuse_reply_err(req, tlen > GEN_LINK_TARGET_MAX ? ENAMETOOLONG : ENOSPC);
		return;
	}
	node *n = fs_new_node(dm, K_TMPLINK, parent, name);
	if (n && !(n->target = strdup(link))) {
		fs_maybe_free(dm, n);
		n = NULL;
	}
	if (!n) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fs_link_name(dm, n);
	fs_answer_entry_locked(req, n);
}

/* mv of a symlink made in generations/: onto active flips it to the
 * link's target, else renames the link. */
static void rename_gens(fuse_req_t req, node *p, const char *name, node *np, const char *newname,
			unsigned flags)
{
	fs_daemon *dm = fuse_req_userdata(req);
	fuse_ino_t parent = p->ino;
	(void)np; /* generations/ itself */
	node *src = fs_find_name(dm, parent, name);
	if (!src || src->kind != K_TMPLINK) {
		pthread_mutex_unlock(&dm->tree.mu);
		uint64_t gen;
		int exists = !strcmp(name, "active") || (!fs_gen_parse_name(name, &gen) && fs_gen_exists(dm->store, gen));
		if (exists)
			fs_errlog(&dm->errors, "mv generations/%s: generations and active cannot be renamed", name);
		fuse_reply_err(req, exists ? EPERM : ENOENT);
		return;
	}
	if (!strcmp(newname, "active")) {
		char *target = strdup(src->target);
		src->opens++;
		pthread_mutex_unlock(&dm->tree.mu);
		if (!target) {
			fs_unpin(dm, src);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		int rc;
		if ((flags & RENAME_NOREPLACE) && vecfs_active(dm->store))
			rc = -EEXIST;
		else
			rc = fs_gen_activate_target(dm, target, "cannot point to");
		free(target);
		pthread_mutex_lock(&dm->tree.mu);
		src->opens--;
		if (rc == 0)
			fs_unlink_name(dm, src);
		fs_maybe_free(dm, src);
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, -rc);
		return;
	}
	uint64_t gen;
	if (!fs_gen_parse_name(newname, &gen)) {
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "mv generations/%s generations/%s: numeric names are reserved for generations", name,
		       newname);
		fuse_reply_err(req, EPERM);
		return;
	}
	node *dst = fs_find_name(dm, parent, newname);
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
		fs_unlink_name(dm, dst);
		fs_maybe_free(dm, dst);
	}
	char *nn = strdup(newname);
	if (!nn) {
		pthread_mutex_unlock(&dm->tree.mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fs_unlink_name(dm, src);
	free(src->name);
	src->name = nn;
	src->namelen = strlen(nn);
	fs_link_name(dm, src);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, 0);
}

const kind_dir_ops fs_gens_dir_ops = {
	.create = create_gens,
	.mkdir = mkdir_gens,
	.rmdir = rmdir_gen,
	.unlink = unlink_gens,
	.symlink = symlink_gens,
	.rename = rename_gens,
};

/* generations/GEN/: read-only, its files fixed. */
const kind_dir_ops fs_gen_dir_ops = {
	.create = create_gens,
	.mkdir = mkdir_gens,
};
