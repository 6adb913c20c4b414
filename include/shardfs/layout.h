/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.h - how member paths become the mounted tree (-o layout=).
 *
 *   tree     the member paths as stored (the default)
 *   shards   <shard name without .tar>/<member path>: one directory per
 *            shard, for tools that want to see the set's structure
 *   classes  <label>/<member path>: an ImageFolder tree made from flat
 *            WebDataset shards, the label of each sample taken from its
 *            .cls member or a (possibly nested) field of its .json
 *            member, optionally mapped to a class name through a file of
 *            "index name" lines.  The member's directories stay under the
 *            label, so that samples whose base names collide stay apart.
 *            Numeric labels are zero-padded to the width of the largest
 *            (0..999 -> 000..999), so that sorting the class directories
 *            as strings, as ImageFolder does, gives the numeric order and
 *            class_to_idx[dir] == int(label).
 *
 * A WebDataset sample is the group of members sharing a key: the member
 * path up to the first dot of its last component ("a/0001.seg.png" has the
 * key "a/0001"; a leading dot is part of the name, path_sample_key_len()
 * in path.h).  The classes layout reads each label member (at most
 * LAYOUT_LABEL_FILE_MAX bytes) during the index scan; this is the only
 * layout that reads member data at mount time.
 *
 * Thread-safety: a parsed layout is read-only and shared by the scanning
 * threads.
 */
#ifndef SHARDFS_LAYOUT_H
#define SHARDFS_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

/* Largest .cls or .json member read for a label; larger ones are ignored. */
#define LAYOUT_LABEL_FILE_MAX (64u * 1024)
/* Longest line of a classnames file. */
#define LAYOUT_CLASSNAMES_LINE_MAX 4096

enum layout_kind {
	LAYOUT_TREE,	/* paths as stored */
	LAYOUT_SHARDS,	/* one top-level directory per shard */
	LAYOUT_CLASSES,	/* <label>/<base name> */
};

struct layout_classname;

struct layout {
	enum layout_kind kind;		/* which layout */
	char *json_field;		/* label from this .json field ("a.b":
					 * field b of object a); NULL: from
					 * the .cls member */
	char *label_source;		/* the label= option, for messages */
	char *unlabeled;		/* directory for samples without a
					 * label; NULL: skip them */
	struct layout_classname *names;	/* label -> class name (uthash) */
};

/*
 * Parse the options: @kind "tree", "shards" or "classes" (NULL: tree);
 * @label "cls" or "json:FIELD" (NULL: cls); @classnames a file path or
 * NULL; @unlabeled a directory name, "skip", or NULL for "_unlabeled".
 * Errors are logged; returns 0, -EINVAL or -ENOMEM.
 */
int layout_init(struct layout *l, const char *kind, const char *label,
		const char *classnames, const char *unlabeled);

void layout_release(struct layout *l);

/* @l, or the tree layout when @l is NULL (options that name no layout). */
const struct layout *layout_or_tree(const struct layout *l);

/*
 * A hash of everything in @l that changes the tree (NULL: the tree
 * layout), so that an index built under other options is not reused.
 */
uint64_t layout_hash(const struct layout *l);

/* Does the member at @path carry its sample's label under @l? */
bool layout_is_label_member(const struct layout *l, const char *path,
			    size_t len);

/*
 * Turn the content of a label member into a directory name in @out:
 * trimmed, taken from the JSON field if configured, mapped through the
 * class names, a number without leading zeros (the builder pads).
 * *@unmapped tells whether class names were given but none for this
 * label (it is then named by itself).  Returns its length, or -EINVAL
 * when there is no usable label (empty, not a valid file name, field
 * missing).
 */
int layout_label(const struct layout *l, const char *data, size_t len,
		 char *out, size_t out_size, bool *unmapped);

/* Is [s, s + len) a non-empty string of ASCII digits? */
bool layout_is_number(const char *s, size_t len);

#endif
