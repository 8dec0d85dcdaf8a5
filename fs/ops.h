/*
 * fs/ops.h - the FUSE low-level operations, by file:
 *   ops.c            init, statfs and the table of operations
 *   ops_lookup.c     lookup, forget, getattr (entries and attributes)
 *   ops_file.c       create, open, read, write, flush, release, fsync, setattr
 *   ops_namespace.c  mkdir, rmdir, unlink, symlink, rename, readlink
 *   ops_dir.c        opendir, readdir, releasedir, fsyncdir
 *   ops_xattr.c      getxattr, listxattr, setxattr, removexattr
 */
#ifndef VECFS_FS_OPS_H
#define VECFS_FS_OPS_H

#include <sys/stat.h>

#include "fuse_compat.h"
#include "inode.h"

extern const struct fuse_lowlevel_ops fs_ops;

/* ---------------------------------------------------------------- ops_lookup.c */

/* The attributes of n, computed now. */
int node_attr(fs_daemon *dm, node *n, struct stat *st);
/* How long the kernel may keep n's attributes. */
double attr_timeout(fs_daemon *dm, const node *n);
/* Take a lookup reference on n (dm->tree.mu held, and released) and answer
 * with its attributes. */
void answer_entry_locked(fuse_req_t req, node *n);
/* Take dm->tree.mu and find directory node `parent`: NULL (unlocked, ENOENT
 * answered) when there is none. */
node *lock_parent(fuse_req_t req, fuse_ino_t parent);
/* Node ino, looked up under dm->tree.mu. */
node *get_locked(fs_daemon *dm, fuse_ino_t ino);

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* ---------------------------------------------------------------- ops_file.c */

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);
void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
	      struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		struct fuse_file_info *fi);

/* ---------------------------------------------------------------- ops_namespace.c */

void op_readlink(fuse_req_t req, fuse_ino_t ino);
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags);

/* ---------------------------------------------------------------- ops_dir.c */

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);

/* ---------------------------------------------------------------- ops_xattr.c */

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
		 int flags);
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif
