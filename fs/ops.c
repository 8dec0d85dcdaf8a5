/*
 * fs/ops.c - FUSE init and statfs, and the table of the operations (the
 * others are in ops_*.c: see ops.h).
 */
#include "ops.h"

#include <string.h>
#include <sys/statvfs.h>

#include "daemon.h"
#include "out_cache.h"

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)ino;
	struct statvfs sv;
	if (statvfs(dm->store_dir, &sv) != 0)
		memset(&sv, 0, sizeof sv);
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	fs_daemon *dm = userdata;
	/* write errors must reach write()/close(): no writeback cache */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	conn->want &= ~(unsigned)FUSE_CAP_CACHE_SYMLINKS;
	out_cache_negotiate(dm, conn);
	fc_init_conn(dm->fuse, conn);
	dm->max_write = conn->max_write;
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mkdir = op_mkdir,
	.mknod = op_mknod,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.create = op_create,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};
