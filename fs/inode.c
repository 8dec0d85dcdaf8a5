/*
 * fs/inode.c - the nodes of the tree and their tables.
 *
 * Inodes 1..FIXED_MAX are the fixed entries (the root, its files and directories,
 * generations/active).  Everything else gets a node with a fresh inode
 * number when the kernel first looks it up: records/KEY, generations/GEN
 * and its files, query sessions and their files, ingest files and the
 * transient symlinks made while flipping generations/active.  Nodes live
 * while the kernel holds a lookup reference, a handle is open, or (for
 * ingest files, sessions and transient symlinks) while they are linked in
 * their directory.
 */
#include "inode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "out_cache.h"

enum { BY_INO, BY_NAME }; /* which table, and chain pointer of a node */

static size_t hash_ino(fuse_ino_t ino, size_t cap)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1);
}

static size_t hash_name(fuse_ino_t parent, const char *name, size_t len, size_t cap)
{
	uint64_t h = 1469598103934665603ULL ^ parent;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
	return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static size_t node_hash(const node_hash_table *t, const node *n, size_t cap)
{
	return t->by == BY_INO ? hash_ino(n->ino, cap) : hash_name(n->parent, n->name, n->namelen, cap);
}

static void tab_grow(node_hash_table *t)
{
	size_t nc = t->cap ? t->cap * 2 : 4096;
	node **nt = calloc(nc, sizeof *nt);
	if (!nt)
		return;
	for (size_t i = 0; i < t->cap; i++)
		for (node *n = t->slot[i], *nx; n; n = nx) {
			nx = n->next[t->by];
			size_t h = node_hash(t, n, nc);
			n->next[t->by] = nt[h];
			nt[h] = n;
		}
	free(t->slot);
	t->slot = nt;
	t->cap = nc;
}

/* 0, or -ENOMEM when the table cannot grow. */
static int tab_insert(node_hash_table *t, node *n)
{
	if (t->count + 1 > t->cap / 2)
		tab_grow(t);
	if (!t->cap)
		return -ENOMEM;
	size_t h = node_hash(t, n, t->cap);
	n->next[t->by] = t->slot[h];
	t->slot[h] = n;
	t->count++;
	return 0;
}

static void tab_remove(node_hash_table *t, node *n)
{
	for (node **pp = &t->slot[node_hash(t, n, t->cap)]; *pp; pp = &(*pp)->next[t->by])
		if (*pp == n) {
			*pp = n->next[t->by];
			t->count--;
			return;
		}
}

node *fs_get_node(fs_daemon *dm, fuse_ino_t ino)
{
	if (ino >= 1 && ino <= FIXED_MAX)
		return &dm->tree.fixed[ino];
	if (!dm->tree.inos.cap)
		return NULL;
	for (node *n = dm->tree.inos.slot[hash_ino(ino, dm->tree.inos.cap)]; n; n = n->next[BY_INO])
		if (n->ino == ino)
			return n;
	return NULL;
}

node *fs_find_name(fs_daemon *dm, fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	if (!dm->tree.names.cap)
		return NULL;
	for (node *n = dm->tree.names.slot[hash_name(parent, name, len, dm->tree.names.cap)]; n; n = n->next[BY_NAME])
		if (n->parent == parent && n->namelen == len && !memcmp(n->name, name, len))
			return n;
	return NULL;
}

static int stateful(const node *n)
{
	return (kind_of(n)->flags & KF_LINKED) != 0;
}

void fs_node_changed(node *n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_store_explicit(&n->mtime_ns,
			      (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
			      memory_order_relaxed);
}

void fs_node_seen(node *n, uint64_t v)
{
	v |= 1;
	uint64_t before = atomic_exchange_explicit(&n->seen, v, memory_order_relaxed);
	if (before && before != v)
		fs_node_changed(n);
}

uint64_t fs_content_time(fs_daemon *dm, node *n, uint64_t version, uint64_t base)
{
	(void)dm;
	if (version)
		fs_node_seen(n, version * 2 + 1);
	uint64_t t = atomic_load_explicit(&n->mtime_ns, memory_order_relaxed);
	return t > base ? t : base;
}

void fs_link_name(fs_daemon *dm, node *n)
{
	if (n->linked || tab_insert(&dm->tree.names, n))
		return;
	n->linked = 1;
	if (stateful(n))
		fs_node_changed(n); /* made now */
	if (stateful(n) && n->parent <= FIXED_MAX)
		fs_node_changed(&dm->tree.fixed[n->parent]); /* ingest/, query/, generations/ */
	if (n->kind == K_SESSION)
		dm->tree.sessions++;
	if (stateful(n) && n->parent <= FIXED_MAX) {
		n->sib_prev = NULL;
		n->sib_next = dm->tree.children[n->parent];
		if (n->sib_next)
			n->sib_next->sib_prev = n;
		dm->tree.children[n->parent] = n;
	}
}

void fs_unlink_name(fs_daemon *dm, node *n)
{
	if (!n->linked)
		return;
	if (n->kind == K_SESSION)
		dm->tree.sessions--;
	tab_remove(&dm->tree.names, n);
	n->linked = 0;
	if (stateful(n) && n->parent <= FIXED_MAX)
		fs_node_changed(&dm->tree.fixed[n->parent]);
	if (stateful(n) && n->parent <= FIXED_MAX) {
		if (n->sib_prev)
			n->sib_prev->sib_next = n->sib_next;
		else
			dm->tree.children[n->parent] = n->sib_next;
		if (n->sib_next)
			n->sib_next->sib_prev = n->sib_prev;
		n->sib_prev = n->sib_next = NULL;
	}
}

node *fs_new_node(fs_daemon *dm, int kind, fuse_ino_t parent, const char *name)
{
	node *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	n->namelen = strlen(name);
	n->kind = kind;
	n->parent = parent;
	n->ino = dm->tree.next_ino;
	if (tab_insert(&dm->tree.inos, n)) {
		free(n->name);
		free(n);
		return NULL;
	}
	dm->tree.next_ino++;
	return n;
}

/* Free a node and what it owns (not the tables' links). */
static void node_destroy(fs_daemon *dm, node *n)
{
	if (n->ing)
		fs_ingest_free(n->ing);
	if (n->qs)
		fs_qs_free(n->qs);
	fs_out_backing_close(dm, n);
	free(n->target);
	free(n->name);
	free(n);
}

void fs_maybe_free(fs_daemon *dm, node *n)
{
	if (!n || n->ino <= FIXED_MAX)
		return;
	if (n->nlookup || n->opens || n->kids || (n->linked && stateful(n)))
		return;
	fs_unlink_name(dm, n);
	tab_remove(&dm->tree.inos, n);
	node *sess = n->session;
	node_destroy(dm, n);
	if (sess) {
		sess->kids--;
		fs_maybe_free(dm, sess);
	}
}

node *fs_pin(fs_daemon *dm, fuse_ino_t ino)
{
	pthread_mutex_lock(&dm->tree.mu);
	node *n = fs_get_node(dm, ino);
	if (n)
		n->opens++;
	pthread_mutex_unlock(&dm->tree.mu);
	return n;
}

void fs_unpin(fs_daemon *dm, node *n)
{
	pthread_mutex_lock(&dm->tree.mu);
	n->opens--;
	fs_maybe_free(dm, n);
	pthread_mutex_unlock(&dm->tree.mu);
}

node *fs_child_locked(fs_daemon *dm, node *p, const char *name, int *err)
{
	const fs_kind *pk = kind_of(p);
	int k = fs_entry_kind(p->kind, name);
	node *n;
	*err = ENOENT;
	if (!S_ISDIR(pk->mode)) {
		*err = ENOTDIR;
		return NULL;
	}
	if (!k) /* a name of its own (NULL: none) */
		return pk->lookup ? pk->lookup(dm, p, name, err) : NULL;
	if (k <= FIXED_MAX)
		return &dm->tree.fixed[k];
	/* a fixed file of a session or a generation */
	n = fs_find_name(dm, p->ino, name);
	if (!n && (n = fs_new_node(dm, k, p->ino, name))) {
		n->gen = p->gen;
		if (p->kind == K_SESSION) {
			n->session = p;
			p->kids++;
		}
		fs_link_name(dm, n);
	}
	if (!n)
		*err = ENOMEM;
	return n;
}

fuse_ino_t fs_listed_ino(const char *name, size_t len, fuse_ino_t parent)
{
	uint64_t h = 1469598103934665603ULL ^ parent;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
	return (fuse_ino_t)((h >> 2) | (1ULL << 62));
}

const char *fs_kind_path(fs_daemon *dm, const node *n, char *buf, size_t cap)
{
	const node *p = n->parent ? fs_get_node(dm, n->parent) : NULL;
	if (n->ino == K_ROOT)
		snprintf(buf, cap, "/");
	else if (n->ino <= FIXED_MAX)
		snprintf(buf, cap, "%s", n->name);
	else if (p && p->kind == K_SESSION)
		snprintf(buf, cap, "query/%s/%s", p->name, n->name);
	else if (p && p->kind == K_GEN)
		snprintf(buf, cap, "generations/%s/%s", p->name, n->name);
	else if (p)
		snprintf(buf, cap, "%s/%s", p->name, n->name);
	else
		snprintf(buf, cap, "%s", n->name);
	return buf;
}

/* ---------------------------------------------------------------- setup */

int fs_tree_init(fs_daemon *dm)
{
	node_table *t = &dm->tree;
	memset(t, 0, sizeof *t);
	pthread_mutex_init(&t->mu, NULL);
	t->inos.by = BY_INO;
	t->names.by = BY_NAME;
	t->next_ino = 1000;
	t->uid = getuid();
	t->gid = getgid();
	for (int k = K_ROOT; k <= FIXED_MAX; k++) {
		node *n = &dm->tree.fixed[k];
		memset(n, 0, sizeof *n);
		n->ino = (fuse_ino_t)k;
		n->kind = k;
		n->name = (char *)fs_kind_row(k)->name;
		n->namelen = strlen(n->name);
		n->parent = (fuse_ino_t)fs_kind_row(k)->parent;
	}
	tab_grow(&t->inos);
	tab_grow(&t->names);
	int bad = fs_kinds_check();
	if (bad) {
		fs_log_msg("kind %d: its row in fs/kinds.c does not fit the tree", bad);
		return -EINVAL;
	}
	return t->inos.cap && t->names.cap ? 0 : -ENOMEM;
}

void fs_tree_destroy(fs_daemon *dm)
{
	pthread_mutex_lock(&dm->tree.mu);
	for (size_t i = 0; i < dm->tree.inos.cap; i++) {
		node *n = dm->tree.inos.slot[i];
		while (n) {
			node *nx = n->next[BY_INO];
			node_destroy(dm, n);
			n = nx;
		}
		dm->tree.inos.slot[i] = NULL;
	}
	free(dm->tree.inos.slot);
	free(dm->tree.names.slot);
	dm->tree.inos = (node_hash_table){.by = BY_INO};
	dm->tree.names = (node_hash_table){.by = BY_NAME};
	pthread_mutex_unlock(&dm->tree.mu);
	pthread_mutex_destroy(&dm->tree.mu);
}
