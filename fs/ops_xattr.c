/*
 * fs/ops_xattr.c - FUSE getxattr, listxattr, setxattr and removexattr: a
 * record's payload is its extended attribute user.payload, read only.
 */
#include "ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "render.h"
#include "sbuf.h"
#include "errors.h"

#define PAYLOAD_XATTR "user.payload"
#define WORKERS_XATTR "user.workers" /* of stats; not listed: a gauge, not data */

/* The payload of record n into buf (capacity cap, may be 0: its length
 * only): its length, 0 when it has none, or -errno. */
static long record_payload(fs_daemon *dm, const node *n, char *buf, size_t cap)
{
	uint32_t dim;
	size_t plen = 0;
	int rc = vecfs_get(dm->store, n->name, n->namelen, NULL, 0, &dim, buf, cap, &plen);
	if (rc) {
		if (rc != -ENOENT)
			fs_errlog_err(&dm->errors, rc, "records/%s: user.payload: %s", n->name,
				   rc == -EIO ? RECORD_DAMAGED : strerror(-rc));
		return rc;
	}
	if (cap && plen > cap) { /* larger than any payload: damaged */
		fs_errlog_err(&dm->errors, -EIO, "records/%s: user.payload: %s", n->name, RECORD_DAMAGED);
		return -EIO;
	}
	return (long)plen;
}

/* Answer an attribute request of `size` bytes (0: its length) with the
 * `len` bytes at p. */
static void reply_sized(fuse_req_t req, const char *p, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, p, len);
}

void fs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_get_locked(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (n->kind == K_STATS && !strcmp(name, WORKERS_XATTR)) {
		sbuf b;
		fs_sb_init(&b);
		int rc = fs_render_workers(dm, &b);
		if (rc)
			fuse_reply_err(req, -rc);
		else
			reply_sized(req, b.p, b.len, size);
		fs_sb_free(&b);
		return;
	}
	if (n->kind != K_RECORD || strcmp(name, PAYLOAD_XATTR)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	/* read it whole: a buffer smaller than the payload is ERANGE */
	char *buf = NULL;
	if (size && !(buf = malloc(VECFS_PAYLOAD_MAX))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	long len = record_payload(dm, n, buf, size ? VECFS_PAYLOAD_MAX : 0);
	if (len < 0)
		fuse_reply_err(req, (int)-len);
	else if (len == 0)
		fuse_reply_err(req, ENODATA);
	else
		reply_sized(req, buf, (size_t)len, size);
	free(buf);
}

void fs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	fs_daemon *dm = fuse_req_userdata(req);
	node *n = fs_get_locked(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	long len = n->kind == K_RECORD ? record_payload(dm, n, NULL, 0) : 0;
	if (len < 0)
		fuse_reply_err(req, (int)-len);
	else if (len == 0)
		reply_sized(req, NULL, 0, size);
	else
		reply_sized(req, PAYLOAD_XATTR, sizeof PAYLOAD_XATTR, size);
}

/* No attribute can be set or removed: payloads come from ingest/ (see
 * fs/DESIGN.md for why ENOTSUP). */
void fs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
		 int flags)
{
	(void)ino;
	(void)name;
	(void)value;
	(void)size;
	(void)flags;
	fuse_reply_err(req, ENOTSUP);
}

void fs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	(void)name;
	fuse_reply_err(req, ENOTSUP);
}
