/*
 * layout/meta.h - the fixed-size values of the small key families: store
 * counters, stored configuration, change-log entries, generation metadata
 * and cluster manifests, with their loads, saves and walks (and a
 * generation's centroids).  Values are host-endian (little-endian x86-64
 * and arm64), written and read with memcpy since LMDB gives no alignment.
 */
#ifndef VF_META_H
#define VF_META_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "vecfs stores little-endian values"
#endif

#define VF_META_CONFIG "config"
#define VF_META_COUNTERS "counters"
#define VF_META_ACTIVE "active"

typedef struct vf_counters {
	uint64_t next_id;     /* internal record ids */
	uint64_t seq;         /* last committed change sequence number */
	uint64_t next_key;    /* assigned user keys */
	uint64_t next_gen;
	uint64_t live;
	uint64_t deleted;     /* deletes since the store was made */
	uint64_t ingest_rows;
	uint64_t compactions;  /* compactions run */
	uint64_t rebalances;   /* rebalances run */
} vf_counters;

/* The configuration as versions 1 and 2 of the store keep it (engine/config.c
 * writes version 3, a slot a setting, and reads both). */
typedef struct vf_stored_config_v2 {
	uint32_t version;
	uint32_t dim;
	uint32_t metric;
	uint32_t nlist;
	uint32_t bits;
	uint32_t nprobe;
	uint32_t k;
	uint32_t refine;
	uint64_t auto_build;
	uint32_t compact_deltas;
	uint32_t keep_generations;
	uint64_t seed;
	uint32_t rebalance_ratio;
	uint32_t recall_ppm;   /* recall_target in millionths; 0: 0.95 (version 2) */
} vf_stored_config_v2;

enum { VF_OP_PUT = 1, VF_OP_DEL = 2 };
typedef struct vf_change {
	uint64_t id;
	uint64_t gen;     /* generation that got a delta posting for it, 0 none */
	uint32_t cluster; /* its cluster there */
	uint32_t op;
} vf_change;

typedef struct vf_genmeta {
	uint64_t id;
	uint32_t state;     /* vecfs_gen_state */
	uint32_t metric;
	uint64_t created;
	uint64_t snap_seq;  /* the snapshot its blocks were built from */
	uint64_t synced_seq;/* postings and tombstones are exact up to here */
	uint64_t blocks_seq;/* packed blocks hold every live record up to here */
	uint64_t pending;   /* delta postings and tombstones since the last compaction */
	uint64_t covered;   /* records in its blocks */
	uint64_t parent;
	uint64_t seed;
	uint32_t nlist, bits, dim, pdim;
	double build_seconds;
	uint64_t id_limit;  /* internal ids below this may have assignments */
	uint32_t pct;
	char phase[28];
	/* (from here on absent in generations written before the field: they
	 * load as 0) */
	uint32_t flags;     /* VF_GEN_* */
	uint32_t spare;
} vf_genmeta;

/* The first pass's look-up table is built once a query over R q, not once
 * a cluster over R (q - c): each code's first-pass add factor and its cdot
 * take the cluster's share in (vf_encoder_init()). */
#define VF_GEN_QUERY_TABLE 1u
/* The bytes of a generation's meta written before `flags` existed. */
#define VF_GENMETA_V1_SIZE offsetof(vf_genmeta, flags)

typedef struct vf_manifest {
	uint64_t vectors;    /* postings in packed blocks */
	uint64_t deltas;     /* delta postings */
	uint64_t tombstones;
	uint32_t blocks;
	uint32_t pad;
} vf_manifest;

/* Loading and saving them.  The loads return 0, -EIO for a value of the
 * wrong size, or another negative errno. */
/* A fixed-size value of the meta family: -ENOENT when it is missing. */
int vf_load_meta(vf_txn *txn, vf_store *s, const char *key, void *out, size_t len);
/* The configuration's bytes (engine/config.c gives them their form). */
int vf_save_config(vf_txn *txn, vf_store *s, const void *data, size_t len);
/* Them into buf (cap bytes at most: -EIO when longer), *len set; -ENOENT
 * when the store has none. */
int vf_load_config_bytes(vf_txn *txn, vf_store *s, void *buf, size_t cap, size_t *len);
/* A store without counters has next_gen 1 and the rest 0. */
int vf_load_counters(vf_txn *txn, vf_store *s, vf_counters *c);
/* The same, in a read transaction of its own. */
int vf_read_counters(vf_store *s, vf_counters *c);
int vf_save_counters(vf_txn *txn, vf_store *s, const vf_counters *c);
/* The active generation, 0 for none. */
uint64_t vf_load_active(vf_txn *txn, vf_store *s);
int vf_save_active(vf_txn *txn, vf_store *s, uint64_t gen);
int vf_load_genmeta(vf_txn *txn, vf_store *s, uint64_t gen, vf_genmeta *m);
int vf_save_genmeta(vf_txn *txn, vf_store *s, const vf_genmeta *m);
/* A cluster without a manifest has an empty one. */
int vf_load_manifest(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     vf_manifest *m);
int vf_save_manifest(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     const vf_manifest *m);
/* The centroids of generation gen: n floats, saved with their checksum;
 * loaded (-EIO when the value is not n floats or fails its checksum). */
int vf_save_centroids(vf_txn *txn, vf_store *s, uint64_t gen, const float *c, size_t n);
int vf_load_centroids(vf_txn *txn, vf_store *s, uint64_t gen, float *c, size_t n);
/* The centre of a generation with VF_GEN_QUERY_TABLE: dim floats, the same
 * way. */
int vf_save_center(vf_txn *txn, vf_store *s, uint64_t gen, const float *c, size_t dim);
int vf_load_center(vf_txn *txn, vf_store *s, uint64_t gen, float *c, size_t dim);
/* A generation's recall calibration (engine/calibrate.h): len bytes, saved
 * with their checksum; loaded (-ENOENT for a generation without one, -EIO
 * for a value of another size or a failed checksum). */
int vf_save_calib(vf_txn *txn, vf_store *s, uint64_t gen, const void *c, size_t len);
int vf_load_calib(vf_txn *txn, vf_store *s, uint64_t gen, void *c, size_t len);
/* The change log: entry seq written (after every other one); the entries
 * in order on a cursor of the changes family, from change `from` on (op
 * VF_SEEK), then the next one (op VF_NEXT): 0 with its seq and *c, -ENOENT
 * past the last, -EIO for a damaged entry. */
int vf_change_put(vf_txn *txn, vf_store *s, uint64_t seq, const vf_change *c);
int vf_changes_walk(vf_cursor *cur, int op, uint64_t from, uint64_t *seq, vf_change *c);
/* Each generation's metadata in id order, on a cursor of the gens family:
 * op VF_FIRST, then VF_NEXT; -ENOENT after the last.  A value of another
 * size than a vf_genmeta is passed over. */
int vf_genmeta_walk(vf_cursor *cur, int op, vf_genmeta *m);
/* The ids of the generations (up to cap of them in ids), how many in *n. */
int vf_list_gens(vf_txn *txn, vf_store *s, uint64_t *ids, size_t cap, size_t *n);
/* Delete every key of a generation (postings and gens families). */
int vf_drop_generation_keys(vf_txn *txn, vf_store *s, uint64_t gen);

#endif
