/*
 * fs/inode.h - the nodes of the tree and the tables that find them, by
 * inode number and by (parent, name).
 */
#ifndef VECFS_FS_INODE_H
#define VECFS_FS_INODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fuse_compat.h"
#include "ingest.h"
#include "kinds.h"
#include "query.h"

typedef struct fs_daemon fs_daemon;

typedef struct node {
	fuse_ino_t ino;
	int kind;
	uint64_t nlookup;
	int opens;
	int linked;           /* in the name table under its parent */
	int kids;             /* session files referring to this session */
	fuse_ino_t parent;
	char *name;
	size_t namelen;
	uint64_t gen;         /* generation of K_GEN and its files */
	ingest *ing;          /* K_INGEST_FILE */
	qsession *qs;         /* K_SESSION */
	int out_bid;          /* K_SESSION: backing file id of out (passthrough), or 0 */
	int out_fd;           /* K_SESSION: that backing file, while out_bid > 0 */
	size_t out_len;       /* K_SESSION: its size (SIZE_MAX: not known) */
	atomic_int out_attrs; /* K_SESSION: out's attributes were given to the
			       * kernel since fs_push_out() last dropped them */
	struct node *session; /* session files: their session node */
	char *target;         /* K_TMPLINK */
	_Atomic uint64_t mtime_ns; /* its last change seen since the mount (0: none) */
	_Atomic uint64_t seen; /* odd: the version or hash of its content when last
			       * seen (fs_node_seen()); 0: not seen yet */
	/* readable files whose content has versions (render.c), under
	 * dm->reads.mu: */
	struct rendering *shared; /* the rendering of the version handles
				   * opened last, while one holds it */
	uint64_t size_version;    /* the version whose size is `size` (0: none) */
	uint64_t size;
	struct node *next[2];  /* chains of the tables: by ino, by (parent, name) */
	struct node *sib_prev, *sib_next; /* children list of stateful dirs */
} node;

/* A chained hash table of nodes (by ino, or linked names by (parent,
 * name)), using its own chain pointer of the node. */
typedef struct node_hash_table {
	node **slot;
	size_t cap, count;
	int by;
} node_hash_table;

/* The daemon's nodes (dm->tree). */
typedef struct node_table {
	pthread_mutex_t mu;  /* guards the tables and every node's counts,
			      * links and names */
	node fixed[FIXED_MAX + 1];
	node_hash_table inos, names;
	fuse_ino_t next_ino;
	node *children[FIXED_MAX + 1]; /* of K_INGEST, K_QUERY, K_GENS */
	unsigned sessions;              /* linked K_SESSION nodes */
	uid_t uid;                      /* the owner of every file */
	gid_t gid;
} node_table;

/* With dm->tree.mu held. */
node *fs_get_node(fs_daemon *dm, fuse_ino_t ino);
node *fs_find_name(fs_daemon *dm, fuse_ino_t parent, const char *name);
/* Times of what the daemon sees change: n changed now; n's content has
 * version or hash v now (a change from the one seen before is a change
 * now); when n last changed, at least base (version, if not 0, is seen
 * first). */
void fs_node_changed(node *n);
void fs_node_seen(node *n, uint64_t v);
uint64_t fs_content_time(fs_daemon *dm, node *n, uint64_t version, uint64_t base);
void fs_link_name(fs_daemon *dm, node *n);
void fs_unlink_name(fs_daemon *dm, node *n);
node *fs_new_node(fs_daemon *dm, int kind, fuse_ino_t parent, const char *name);
/* Free n once nothing refers to it any more. */
void fs_maybe_free(fs_daemon *dm, node *n);
/* Find or make the child `name` of p.  NULL with *err set when there is
 * none. */
node *fs_child_locked(fs_daemon *dm, node *p, const char *name, int *err);
/* The inode number a listing gives entry `name` of directory parent
 * that has no node yet (never one of a node's). */
fuse_ino_t fs_listed_ino(const char *name, size_t len, fuse_ino_t parent);
/* The path of n in the tree, for errors lines. */
const char *fs_kind_path(fs_daemon *dm, const node *n, char *buf, size_t cap);

/* Keep node ino while a request uses it outside dm->tree.mu (NULL: no
 * such node); fs_unpin() lets it go (freed once nothing refers to it). */
node *fs_pin(fs_daemon *dm, fuse_ino_t ino);
void fs_unpin(fs_daemon *dm, node *n);

/* The fixed nodes and empty tables: 0, -ENOMEM, or -EINVAL (with a
 * message) when the rows of kinds.c do not fit the tree (fs_kinds_check()). */
int fs_tree_init(fs_daemon *dm);
/* Free every node. */
void fs_tree_destroy(fs_daemon *dm);

#endif
