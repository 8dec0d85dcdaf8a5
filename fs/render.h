/*
 * fs/render.h - what the readable files of the tree read.
 */
#ifndef VECFS_FS_RENDER_H
#define VECFS_FS_RENDER_H

#include "sbuf.h"
#include "vecfs.h"

typedef struct fs_daemon fs_daemon;
struct node;

void fs_render_readme(sbuf *b);
int fs_render_config(vecfs *v, sbuf *b);
int fs_render_stats(vecfs *v, sbuf *b);
/* The whole content of the readable file n. */
int fs_render_node(fs_daemon *dm, struct node *n, sbuf *b);

/*
 * What an open read handle reads: one rendering of the file's content.
 * A file whose content has versions (README; config, records/KEY and a
 * generation's clusters at each store version; a ready generation's
 * centroids.fvecs once for all) is rendered once per version, and the
 * handles that open it at that version share the rendering; it is freed
 * when the last of them lets it go.  Other files (stats, errors, meta,
 * progress, a session's results) are rendered for each handle.  What all
 * handles hold together counts against dm->reads (-o read_buffer_mb): past
 * it the open (or the read that renders anew) fails with ENOMEM and an
 * errors line.  A version's size is kept once known, so a stat of the file
 * at that version renders nothing.
 */
typedef struct rendering {
	char *data;
	size_t len;
	uint64_t version;    /* of the content shown; 0: one handle's own */
	int refs;            /* handles holding it (dm->reads.mu) */
	struct node *owner;  /* the node whose `shared` it is, or NULL */
} rendering;

/* What an errors line says of a record that fails its checksum (EIO). */
#define RECORD_DAMAGED                                                                 \
	"the record fails its checksum (damaged): rm it and ingest it again, or "    \
	"echo salvage > ctl"

/* A rendering of n as it is now for one more handle: 0, or -errno (a
 * damaged record's EIO with an errors line). */
int fs_rendering_get(fs_daemon *dm, struct node *n, rendering **out);
/* A handle lets r go. */
void fs_rendering_put(fs_daemon *dm, rendering *r);
/* The size of n's content now, rendered only when the size of its
 * version is not known yet: 0, or the -errno of rendering it. */
int fs_render_size(fs_daemon *dm, struct node *n, uint64_t *size);

/* The `user.workers` attribute of stats: the workers listening now. */
int fs_render_workers(fs_daemon *dm, sbuf *b);

#endif
