#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Give every source file of the repository an SPDX license line:
#
#   /* SPDX-License-Identifier: Apache-2.0 */     first line of C sources and headers
#   # SPDX-License-Identifier: Apache-2.0         first line of Python, shell, CMake
#                                                 and TOML files (after a #! line)
#
# Source files: the files git tracks under src/, include/, tests/, python/,
# scripts/, cmake/ and packaging/ and the top CMakeLists.txt, by name
# (*.c, *.h, *.py, *.sh, *.cmake, *.toml, CMakeLists.txt) or, without such
# a name, by a #! first line.  tests/data/ is third-party and generated test
# data under its own licenses (see packaging/deb/copyright) and is left alone.
# A file that has the line within its first five lines is left alone, so
# running this again changes nothing.
#
#   scripts/add-spdx.sh [ROOT]           add the line where it is missing
#   scripts/add-spdx.sh --check [ROOT]   list the files that lack it; exit 1
#                                        if there is one (tests use this)
#
# ROOT is a git work tree (default: the one holding this script).
set -eu
LINE="SPDX-License-Identifier: Apache-2.0"
check=0
if [ "${1:-}" = --check ]; then
	check=1
	shift
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

# The comment style of a source file: c, hash, or nothing for a file that
# is not source.
style() {
	case $1 in
	*.c | *.h) echo c ;;
	*.py | *.sh | *.cmake | *.toml | */CMakeLists.txt | CMakeLists.txt) echo hash ;;
	*) if head -c 2 "$root/$1" | grep -q '^#!'; then echo hash; fi ;;
	esac
}

# Insert the line in FILE (STYLE c or hash), keeping a #! line first.
add_line() {
	file=$1
	tmp=$file.spdx-tmp
	if [ "$2" = c ]; then
		{ echo "/* $LINE */"; cat "$file"; } > "$tmp"
	elif head -n 1 "$file" | grep -q '^#!'; then
		{ head -n 1 "$file"; echo "# $LINE"; tail -n +2 "$file"; } > "$tmp"
	else
		{ echo "# $LINE"; cat "$file"; } > "$tmp"
	fi
	chmod --reference="$file" "$tmp"
	mv "$tmp" "$file"
}

missing=0
git -C "$root" ls-files -z -- src include tests python scripts cmake packaging \
	CMakeLists.txt | tr '\0' '\n' | grep -v '^tests/data/' |
{
	while IFS= read -r f; do
		[ -f "$root/$f" ] || continue
		s=$(style "$f")
		[ -n "$s" ] || continue
		head -n 5 "$root/$f" | grep -q "$LINE" && continue
		missing=$((missing + 1))
		if [ "$check" = 1 ]; then
			echo "$f"
		else
			add_line "$root/$f" "$s"
		fi
	done
	[ "$check" = 0 ] || [ "$missing" = 0 ]
}
