/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.c - user and group names, for --keep-owner.
 *
 * A tree has few distinct owners, so each id is looked up once in the
 * system databases (getpwuid_r/getgrgid_r, which may ask NSS services)
 * and remembered in a small table.  An id without a name, or with one
 * longer than PACK_OWNER_NAME_MAX, is stored as a number only, as GNU tar
 * does.  The names belong to the tree and are freed with it.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"
#include "shardfs/util.h"

/* Largest buffer offered to getpwuid_r/getgrgid_r before giving up. */
#define OWNER_BUF_MAX (1u << 20)

/* One id that has been looked up. */
struct owner_id {
	uint32_t id;		/* uid or gid */
	const char *name;	/* its name, owned by the tree; "" if none */
};

/* Ids looked up so far, of users or of groups. */
struct owner_table {
	struct owner_id *ids;	/* in the order first seen */
	size_t count;		/* entries in use */
	size_t cap;		/* entries allocated */
	bool group;		/* gids rather than uids */
};

/* Look @id up with a buffer of @size bytes; *name is NULL if it has none. */
static int owner_query(uint32_t id, bool group, char *buf, size_t size,
		       const char **name)
{
	struct passwd pw, *pw_found;
	struct group gr, *gr_found;
	int rc;

	if (group) {
		rc = getgrgid_r(id, &gr, buf, size, &gr_found);
		*name = !rc && gr_found ? gr.gr_name : NULL;
	} else {
		rc = getpwuid_r(id, &pw, buf, size, &pw_found);
		*name = !rc && pw_found ? pw.pw_name : NULL;
	}
	return rc == ERANGE ? -ERANGE : 0;
}

/* Find the name of @id; *name is a new string, or NULL if it has none. */
static int owner_lookup(uint32_t id, bool group, char **name)
{
	const char *found = NULL;
	char *buf = NULL, *bigger;
	size_t size = 1024;
	int rc;

	do {
		bigger = realloc(buf, size);
		if (!bigger) {
			free(buf);
			return -ENOMEM;
		}
		buf = bigger;
		rc = owner_query(id, group, buf, size, &found);
		size *= 2;
	} while (rc == -ERANGE && size <= OWNER_BUF_MAX);
	rc = 0;
	*name = NULL;
	if (found && strlen(found) < PACK_OWNER_NAME_MAX) {
		*name = strdup(found);
		rc = *name ? 0 : -ENOMEM;
	}
	free(buf);
	return rc;
}

/* Give @name (NULL for none) to the tree; *kept is what entries point to. */
static int owner_keep(struct pack_tree *tree, char *name, const char **kept)
{
	*kept = "";
	if (!name)
		return 0;
	if (array_grow((void **)&tree->owner_names, &tree->owner_name_cap,
		       tree->owner_name_count + 1, sizeof(*tree->owner_names))) {
		free(name);
		return -ENOMEM;
	}
	tree->owner_names[tree->owner_name_count++] = name;
	*kept = name;
	return 0;
}

/* The name of @id, looked up on first use. */
static int owner_name(struct pack_tree *tree, struct owner_table *t,
		      uint32_t id, const char **name)
{
	char *found;
	int rc;

	for (size_t i = 0; i < t->count; i++) {
		if (t->ids[i].id == id) {
			*name = t->ids[i].name;
			return 0;
		}
	}
	if (array_grow((void **)&t->ids, &t->cap, t->count + 1, sizeof(*t->ids)))
		return -ENOMEM;
	rc = owner_lookup(id, t->group, &found);
	if (!rc)
		rc = owner_keep(tree, found, name);
	if (rc)
		return rc;
	t->ids[t->count].id = id;
	t->ids[t->count++].name = *name;
	return 0;
}

int pack_owner_names(struct pack_tree *tree)
{
	struct owner_table users = { .group = false };
	struct owner_table groups = { .group = true };
	int rc = 0;

	for (size_t i = 0; i < tree->count && !rc; i++) {
		struct pack_entry *e = &tree->entries[i];

		rc = owner_name(tree, &users, e->uid, &e->uname);
		if (!rc)
			rc = owner_name(tree, &groups, e->gid, &e->gname);
	}
	free(users.ids);
	free(groups.ids);
	return rc;
}
