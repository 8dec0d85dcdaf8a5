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
	/* no directory has an ioctl: the kernel answers ENOTTY itself */
	conn->want &= ~(unsigned)FUSE_CAP_IOCTL_DIR;
	fs_out_cache_negotiate(dm, conn);
	fs_fc_init_conn(dm->fuse, conn);
	dm->max_write = conn->max_write;
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = fs_op_lookup,
	.forget = fs_op_forget,
	.forget_multi = fs_op_forget_multi,
	.getattr = fs_op_getattr,
	.setattr = fs_op_setattr,
	.readlink = fs_op_readlink,
	.mkdir = fs_op_mkdir,
	.mknod = fs_op_mknod,
	.unlink = fs_op_unlink,
	.rmdir = fs_op_rmdir,
	.symlink = fs_op_symlink,
	.rename = fs_op_rename,
	.open = fs_op_open,
	.read = fs_op_read,
	.write = fs_op_write,
	.flush = fs_op_flush,
	.ioctl = fs_op_ioctl,
	.release = fs_op_release,
	.fsync = fs_op_fsync,
	.opendir = fs_op_opendir,
	.readdir = fs_op_readdir,
	.releasedir = fs_op_releasedir,
	.fsyncdir = fs_op_fsyncdir,
	.statfs = op_statfs,
	.create = fs_op_create,
	.getxattr = fs_op_getxattr,
	.listxattr = fs_op_listxattr,
	.setxattr = fs_op_setxattr,
	.removexattr = fs_op_removexattr,
};
