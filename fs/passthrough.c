/*
 * fs/passthrough.c - FUSE passthrough: the kernel serves reads of a file
 * straight from a file of the daemon's, with no request to the daemon.
 *
 * A query session's out changes only when its query runs; everything else
 * is reads.  With passthrough the daemon writes the rendered out into a
 * memory file before the close() that ran the query returns, and readers
 * read that file through the kernel: a read of out costs no round trip and
 * needs no size check (a GETATTR) first.
 *
 * Passthrough is in Linux since 6.9 (FUSE protocol 7.40), which libfuse
 * 3.14 predates: its INIT reply cannot ask for it, and fuse_reply_open()
 * cannot name a backing file.  So, with such a libfuse (FC_OWN_PASSTHROUGH),
 * the session's I/O goes through the two functions below (libfuse's custom
 * I/O): the read one notes whether the kernel's INIT offers passthrough,
 * the write one adds the request to the INIT reply;
 * fs_fc_reply_open_backing() writes the OPEN reply with the backing file.  A
 * libfuse that knows FUSE_CAP_PASSTHROUGH does both itself.  The ABI
 * numbers are the kernel's (include/uapi/linux/fuse.h).  On a kernel
 * without it, or without CAP_SYS_ADMIN (which registering a backing file
 * needs), fs_fc_backing_open() fails and out is served as before.
 *
 * Being the one writer of replies, pt_writev() also tells the session loop
 * when a reply goes out (fs_loop_replied()).
 */
#include "fuse_compat_private.h"

#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#define PT_STACK_DEPTH  1                 /* vecfs stacks on no other filesystem */

#if FC_OWN_PASSTHROUGH
#define PT_INIT_FLAG2   (1u << (37 - 32)) /* FUSE_PASSTHROUGH, in flags2 */
#define PT_FOPEN        (1u << 7)         /* FOPEN_PASSTHROUGH */

/* offsets into fuse_init_in / fuse_init_out (protocol 7.40) */
#define INIT_IN_FLAGS    12
#define INIT_IN_FLAGS2   16
#define INIT_OUT_FLAGS   12
#define INIT_OUT_FLAGS2  32
#define INIT_OUT_DEPTH   36

struct pt_open_out {      /* fuse_open_out of protocol 7.40 */
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};
#endif

struct pt_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define PT_IOC_BACKING_OPEN  _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

/* The session's userdata begins with the fuse_compat pointer. */
static fuse_compat *fc_of(void *userdata)
{
	return *(fuse_compat **)userdata;
}

#if FC_OWN_PASSTHROUGH

static uint32_t get32(const void *p, size_t off)
{
	uint32_t v;
	memcpy(&v, (const char *)p + off, sizeof v);
	return v;
}

static void put32(void *p, size_t off, uint32_t v)
{
	memcpy((char *)p + off, &v, sizeof v);
}

static ssize_t pt_read(int fd, void *buf, size_t len, void *userdata)
{
	pt_state *pt = &fc_of(userdata)->pt;
	ssize_t n = read(fd, buf, len);
	const struct fuse_in_header *h = buf;
	if (pt->wanted && n >= (ssize_t)(sizeof *h + INIT_IN_FLAGS2 + 4) && h->opcode == FUSE_INIT) {
		const char *in = (const char *)buf + sizeof *h;
		if ((get32(in, INIT_IN_FLAGS) & FUSE_INIT_EXT) &&
		    (get32(in, INIT_IN_FLAGS2) & PT_INIT_FLAG2))
			atomic_store(&pt->init_unique, h->unique);
	}
	return n;
}

/* With FC_OWN_PASSTHROUGH: an INIT reply asks for passthrough when the
 * kernel's INIT offered it (pt_read() saw it). */
static void ask_passthrough(pt_state *pt, const struct fuse_out_header *oh, struct iovec *iov,
			    int count)
{
	uint64_t init = atomic_load(&pt->init_unique);
	if (init && count >= 2 && iov[1].iov_len >= INIT_OUT_DEPTH + 4) {
		if (oh->unique == init && oh->error == 0) {
			void *out = iov[1].iov_base;
			uint32_t flags = get32(out, INIT_OUT_FLAGS);
			/* the kernel refuses passthrough beside a writeback cache */
			if ((flags & FUSE_INIT_EXT) && !(flags & FUSE_WRITEBACK_CACHE)) {
				put32(out, INIT_OUT_FLAGS2, get32(out, INIT_OUT_FLAGS2) | PT_INIT_FLAG2);
				put32(out, INIT_OUT_DEPTH, PT_STACK_DEPTH);
				atomic_store(&pt->asked, 1);
			}
			atomic_store(&pt->init_unique, 0);
		}
	}
}
#endif

static ssize_t pt_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	fuse_compat *fc = fc_of(userdata);
	const struct fuse_out_header *oh = count >= 1 && iov[0].iov_len >= sizeof *oh ?
					   iov[0].iov_base : NULL;
	if (oh && oh->unique != 0)
		fs_loop_replied(fc); /* not a notification: a request is answered */
#if FC_OWN_PASSTHROUGH
	if (oh)
		ask_passthrough(&fc->pt, oh, iov, count);
#endif
	return writev(fd, iov, count);
}

void fs_pt_init(fuse_compat *fc)
{
	memset(&fc->pt, 0, sizeof fc->pt);
	fc->pt.dev_fd = -1;
}

int fs_pt_install(fuse_compat *fc, int passthrough)
{
#if FC_OWN_PASSTHROUGH
	static const struct fuse_custom_io io = {.read = pt_read, .writev = pt_writev};
#else
	static const struct fuse_custom_io io = {.writev = pt_writev};
#endif
	fc->pt.dev_fd = fuse_session_fd(fc->se);
	if (fuse_session_custom_io(fc->se, &io, fc->pt.dev_fd) != 0)
		return -EINVAL;
	fc->pt.wanted = passthrough;
	return 0;
}

int fs_fc_backing_usable(fuse_compat *fc)
{
	pt_state *pt = &fc->pt;
	return pt->wanted && pt->dev_fd >= 0 && atomic_load(&pt->asked) && !atomic_load(&pt->refused);
}

int fs_fc_backing_open(fuse_compat *fc, int fd)
{
	if (!fs_fc_backing_usable(fc))
		return -EOPNOTSUPP;
	struct pt_backing_map map = {.fd = fd};
	int id = ioctl(fc->pt.dev_fd, PT_IOC_BACKING_OPEN, &map);
	if (id > 0)
		return id;
	int rc = id == 0 ? -EIO : -errno;
	/* not passthrough, or not allowed to it: no use asking again */
	if (rc == -EPERM || rc == -ENOTTY || rc == -EINVAL || rc == -EOPNOTSUPP)
		atomic_store(&fc->pt.refused, 1);
	return rc;
}

void fs_fc_backing_close(fuse_compat *fc, int id)
{
	uint32_t v = (uint32_t)id;
	if (id > 0 && fc->pt.dev_fd >= 0)
		ioctl(fc->pt.dev_fd, PT_IOC_BACKING_CLOSE, &v);
}

void fs_pt_detach(fuse_compat *fc)
{
	fc->pt.dev_fd = -1;
}

void fs_fc_init_conn(fuse_compat *fc, struct fuse_conn_info *conn)
{
#if FC_OWN_PASSTHROUGH
	(void)fc;
	(void)conn; /* the INIT reply is changed on its way out: pt_writev() */
#else
	if (fc->pt.wanted && (conn->capable & FUSE_CAP_PASSTHROUGH) &&
	    !(conn->want & FUSE_CAP_WRITEBACK_CACHE)) {
		conn->want |= FUSE_CAP_PASSTHROUGH;
		conn->max_stack_depth = PT_STACK_DEPTH;
		atomic_store(&fc->pt.asked, 1);
	}
#endif
}

int fs_fc_reply_open_backing(fuse_req_t req, const struct fuse_file_info *fi, int backing_id)
{
#if FC_OWN_PASSTHROUGH
	struct pt_open_out o = {
		.fh = fi->fh,
		.open_flags = PT_FOPEN | (fi->noflush ? FOPEN_NOFLUSH : 0),
		.backing_id = backing_id,
	};
	return fuse_reply_buf(req, (const char *)&o, sizeof o);
#else
	struct fuse_file_info f = *fi;
	f.backing_id = backing_id;
	return fuse_reply_open(req, &f);
#endif
}
