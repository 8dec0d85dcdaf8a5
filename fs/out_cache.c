/*
 * fs/out_cache.c - where a query session's out is read from.
 *
 * With FUSE passthrough (passthrough.c) each session has a memory file
 * that the kernel reads in the daemon's place; the results are written
 * into it before the close() that ran the query returns.  Otherwise out is
 * stored in the kernel's page cache (push_out()).  Either way a reader of
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
#include "inode.h"

static struct fuse_session *tree_se;
static int cache_out_wanted, cache_out; /* see push_out() */
static int passthrough_out;               /* see out_backing_open() */
static unsigned out_files, out_files_max; /* sessions with a backing file */
static pthread_mutex_t push_mu = PTHREAD_MUTEX_INITIALIZER;

void tree_set_session(struct fuse_session *se, int want_cache_out, int passthrough)
{
	struct rlimit rl;
	tree_se = se;
	cache_out_wanted = want_cache_out;
	passthrough_out = passthrough;
	/* a backing file is a descriptor held for the session's life: leave
	 * at least half the daemon's descriptors, and 256, to everything else */
	out_files_max = 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 512) {
		rlim_t spare = (rl.rlim_cur - 256) / 2;
		out_files_max = spare < (1u << 20) ? (unsigned)spare : 1u << 20;
	}
}

void out_cache_negotiate(struct fuse_conn_info *conn)
{
	/* only out is cached, and push_out() says when it changes */
	cache_out = cache_out_wanted && (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA);
	if (cache_out) {
		conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
		conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	}
}

/* out is served from a file of the daemon's (passthrough) */
int out_passthrough(const node *n)
{
	return n->kind == K_QOUT && n->session && n->session->out_bid > 0;
}

/* out is served from the kernel's page cache */
int out_cached(const node *n)
{
	return cache_out && n->kind == K_QOUT && !out_passthrough(n);
}

/* Give a new session a backing file for out when passthrough works; else
 * its out is served as the other computed files are. */
void out_backing_open(node *session)
{
	if (!passthrough_out || out_files >= out_files_max || !fc_backing_usable())
		return;
	int fd = memfd_create("vecfs-out", MFD_CLOEXEC);
	if (fd < 0)
		return;
	int id = fc_backing_open(fd);
	if (id > 0) {
		session->out_fd = fd;
		session->out_bid = id;
		session->out_len = 0;
		out_files++;
	} else {
		close(fd);
	}
}

/* With tree_mu held: the session no longer needs its backing file (its
 * readers, if any, keep the kernel's own reference to it). */
void out_backing_close(node *session)
{
	if (session->out_bid <= 0)
		return;
	pthread_mutex_lock(&push_mu); /* no push is writing to it */
	if (ftruncate(session->out_fd, 0) != 0) {
		/* the memory goes with the last reference anyway */
	}
	fc_backing_close(session->out_bid);
	close(session->out_fd);
	session->out_bid = 0;
	session->out_fd = -1;
	out_files--;
	pthread_mutex_unlock(&push_mu);
}

/* A session whose out is passed through: write out into its backing
 * file, so that every reader sees it once the close() that ran the query
 * returns.  A file that cannot take it is emptied, and the close fails. */
static int push_out_backing(node *session)
{
	size_t len = 0;
	int rc = 0;
	/* with push_mu held (the last push writes the latest out) */
	char *p = qs_render(session->qs, QS_OUT, &len);
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
		qs_clear(session->qs);
		errlog("query/%s/out: cannot store the results: %s", session->name, strerror(-rc));
	}
	return rc;
}

/* With push_mu held: the kernel's copy of out (inode ino) replaced. */
static void push_out_cache(node *session, fuse_ino_t ino)
{
	size_t len = 0;
	char *p = qs_render(session->qs, QS_OUT, &len);
	fuse_lowlevel_notify_inval_inode(tree_se, ino, 0, 0);
	if (p && len) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
		bv.buf[0].mem = p;
		if (fuse_lowlevel_notify_store(tree_se, ino, 0, &bv, 0) != 0)
			fuse_lowlevel_notify_inval_inode(tree_se, ino, 0, 0);
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
int push_out(node *session)
{
	int rc = 0, passed;
	pthread_mutex_lock(&tree_mu);
	node *o = find_name(session->ino, "out");
	fuse_ino_t ino = o ? o->ino : 0;
	pthread_mutex_unlock(&tree_mu);
	pthread_mutex_lock(&push_mu); /* the last push stores the latest out */
	passed = session->out_bid > 0;
	if (passed)
		rc = push_out_backing(session);
	else if (cache_out && ino)
		push_out_cache(session, ino);
	pthread_mutex_unlock(&push_mu);
	/* its size: the kernel keeps a passed-through out's attributes, if it
	 * was given them since they were last dropped (a getattr that began
	 * before this push and answers after it is not kept: the drop
	 * outdates it) */
	if (passed && ino && atomic_exchange(&session->out_attrs, 0))
		fuse_lowlevel_notify_inval_inode(tree_se, ino, -1, 0);
	return rc;
}
