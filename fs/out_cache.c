/*
 * fs/out_cache.c - where a query session's out is read from.
 *
 * With FUSE passthrough (passthrough.c) each session has a memory file
 * that the kernel reads in the daemon's place; the results are written
 * into it before the close() that ran the query returns.  Otherwise out is
 * stored in the kernel's page cache (fs_push_out()).  Either way a reader of
 * out needs at most one attribute round trip after a query.
 */
#include "out_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "errors.h"
#include "daemon.h"
#include "held.h"
#include "inode.h"

void fs_out_cache_init(fs_daemon *dm)
{
	memset(&dm->out, 0, sizeof dm->out);
	pthread_mutex_init(&dm->out.push_mu, NULL);
}

void fs_out_cache_fini(fs_daemon *dm)
{
	pthread_mutex_destroy(&dm->out.push_mu);
}

void fs_out_cache_set_session(fs_daemon *dm, struct fuse_session *se, int cache_out,
			   int passthrough)
{
	out_cache *oc = &dm->out;
	struct rlimit rl;
	oc->se = se;
	oc->cache_wanted = cache_out;
	oc->passthrough = passthrough;
	/* a backing file is a descriptor held for the session's life: leave
	 * at least half the daemon's descriptors, and 256, to everything else */
	oc->files_max = 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 512) {
		rlim_t spare = (rl.rlim_cur - 256) / 2;
		oc->files_max = spare < (1u << 20) ? (unsigned)spare : 1u << 20;
	}
}

void fs_out_cache_negotiate(fs_daemon *dm, struct fuse_conn_info *conn)
{
	out_cache *oc = &dm->out;
	/* only out is cached, and fs_push_out() says when it changes */
	oc->cached = oc->cache_wanted && (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA);
	if (oc->cached) {
		conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
		conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	}
}

/* out is served from a file of the daemon's (passthrough) */
int fs_out_passthrough(const node *n)
{
	return n->kind == K_QOUT && n->session && n->session->out_bid > 0;
}

/* out is served from the kernel's page cache */
int fs_out_cached(fs_daemon *dm, const node *n)
{
	return dm->out.cached && n->kind == K_QOUT && !fs_out_passthrough(n);
}

/* Give a new session a backing file for out when passthrough works; else
 * its out is served as the other computed files are. */
void fs_out_backing_open(fs_daemon *dm, node *session)
{
	if (!dm->out.passthrough || dm->out.files >= dm->out.files_max || !fs_fc_backing_usable(dm->fuse))
		return;
	int fd = memfd_create("vecfs-out", MFD_CLOEXEC);
	if (fd < 0)
		return;
	int id = fs_fc_backing_open(dm->fuse, fd);
	if (id > 0) {
		session->out_fd = fd;
		session->out_bid = id;
		session->out_len = 0;
		dm->out.files++;
	} else {
		close(fd);
	}
}

/* With dm->tree.mu held: the session no longer needs its backing file (its
 * readers, if any, keep the kernel's own reference to it). */
void fs_out_backing_close(fs_daemon *dm, node *session)
{
	if (session->out_bid <= 0)
		return;
	pthread_mutex_lock(&dm->out.push_mu); /* no push is writing to it */
	if (ftruncate(session->out_fd, 0) != 0) {
		/* the memory goes with the last reference anyway */
	}
	fs_fc_backing_close(dm->fuse, session->out_bid);
	close(session->out_fd);
	session->out_bid = 0;
	session->out_fd = -1;
	dm->out.files--;
	pthread_mutex_unlock(&dm->out.push_mu);
}

/* A session whose out is passed through: write out into its backing
 * file, so that every reader sees it once the close() that ran the query
 * returns.  A file that cannot take it is emptied, and the close fails. */
static int push_out_backing(fs_daemon *dm, node *session)
{
	size_t len = 0;
	int rc = 0;
	/* with dm->out.push_mu held (the last push writes the latest out) */
	char *p = fs_qs_render(session->qs, QS_OUT, &len);
	if (!p) {
		rc = -ENOMEM;
		len = 0;
	}
	for (size_t done = 0; done < len;) {
		ssize_t w = pwrite(session->out_fd, p + done, len - done, (off_t)done);
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			len = 0;
			break;
		}
		done += (size_t)w;
	}
	/* what a longer out before left past the end goes */
	if (len < session->out_len || rc) {
		if (ftruncate(session->out_fd, (off_t)len) != 0) {
			if (!rc)
				rc = -errno;
			len = SIZE_MAX;
		}
	}
	session->out_len = len;
	free(p);
	if (rc) {
		/* out reads empty: so must stat, out.json and stats */
		fs_qs_clear(session->qs);
		fs_errlog_err(&dm->errors, rc, "query/%s/out: cannot store the results: %s", session->name, strerror(-rc));
	}
	return rc;
}

/* With dm->out.push_mu held: the kernel's copy of out (inode ino) replaced. */
static void push_out_cache(fs_daemon *dm, node *session, fuse_ino_t ino)
{
	FS_ASSERT_HELD(&dm->out.push_mu);
	size_t len = 0;
	char *p = fs_qs_render(session->qs, QS_OUT, &len);
	fuse_lowlevel_notify_inval_inode(dm->out.se, ino, 0, 0);
	if (p && len) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
		bv.buf[0].mem = p;
		if (fuse_lowlevel_notify_store(dm->out.se, ino, 0, &bv, 0) != 0)
			fuse_lowlevel_notify_inval_inode(dm->out.se, ino, 0, 0);
	}
	free(p);
}

/* A session's out is read through the kernel's page cache (keep_cache, a
 * long attribute timeout): after a query the reader gets it in one GETATTR
 * round trip, with no READ and no read at the end of file.  So each time
 * out changes, drop the kernel's copy and store the new one, before the
 * close() that ran the query returns.  The kernel keeps the stored pages
 * when the size changes (EXPLICIT_INVAL_DATA).  An out never looked up has
 * nothing cached: the notifications then fail, harmlessly.  A passed
 * through out has its own file instead; only its attributes are dropped
 * (a stat then asks for the new size, a read does not need it). */
int fs_push_out(fs_daemon *dm, node *session)
{
	fs_node_changed(session); /* its files changed: a query ran */
	int rc = 0, passed;
	pthread_mutex_lock(&dm->tree.mu);
	node *o = fs_find_name(dm, session->ino, "out");
	fuse_ino_t ino = o ? o->ino : 0;
	pthread_mutex_unlock(&dm->tree.mu);
	pthread_mutex_lock(&dm->out.push_mu); /* the last push stores the latest out */
	passed = session->out_bid > 0;
	if (passed)
		rc = push_out_backing(dm, session);
	else if (dm->out.cached && ino)
		push_out_cache(dm, session, ino);
	pthread_mutex_unlock(&dm->out.push_mu);
	/* its size: the kernel keeps a passed-through out's attributes, if it
	 * was given them since they were last dropped (a getattr that began
	 * before this push and answers after it is not kept: the drop
	 * outdates it) */
	if (passed && ino && atomic_exchange(&session->out_attrs, 0))
		fuse_lowlevel_notify_inval_inode(dm->out.se, ino, -1, 0);
	return rc;
}
