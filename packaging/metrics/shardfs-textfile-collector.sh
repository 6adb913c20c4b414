#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# shardfs-textfile-collector - publish a shardfs mount's metrics through the
# Prometheus node exporter's textfile collector.
#
# usage: shardfs-textfile-collector MOUNTPOINT [DIR]
#
# Copies MOUNTPOINT/.shardfs/metrics into DIR/shardfs-NAME.prom (NAME: the
# mount point with '/' as '-', "mnt-train" for /mnt/train), adding the label
# mountpoint="MOUNTPOINT" to every sample so that several mounts on one node
# give distinct series.  DIR defaults to /var/lib/prometheus/node-exporter,
# the directory of Debian's prometheus-node-exporter package.
#
# The file is written under a temporary name and renamed, because the node
# exporter may read the directory at any moment and must never see half a
# file.  When the mount cannot be read (not mounted, or its daemon died:
# "Transport endpoint is not connected") the file is removed, so that no
# stale figures are exported, and the command fails.
#
# Run it every 15 s or so: from shardfs-metrics@.timer, or from cron
#   * * * * * root /usr/local/sbin/shardfs-textfile-collector /mnt/train
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 MOUNTPOINT [DIR]" >&2
	exit 2
fi
mp=${1%/}
dir=${2:-/var/lib/prometheus/node-exporter}
name=$(printf '%s' "${mp#/}" | tr '/' '-')
out="$dir/shardfs-${name:-root}.prom"
tmp="$out.$$.tmp"
trap 'rm -f "$tmp"' EXIT

# A label value escapes backslash and double quote (Prometheus text format);
# the sed replacement then needs '&', '|' and backslash escaped once more.
value=$(printf '%s' "$mp" | sed -e 's/[\\"]/\\&/g' -e 's/[\\&|]/\\&/g')
label="mountpoint=\"$value\""
# Sample lines are "name value", "name{} value" or "name{labels} value":
# add the label to whichever it is (t: done with this line); comments stay.
metric='^\([a-zA-Z_:][a-zA-Z0-9_:]*\)'
if ! sed -e '/^#/b' \
	-e "s|$metric{}|\\1{$label}|;t" \
	-e "s|$metric{|\\1{$label,|;t" \
	-e "s|$metric |\\1{$label} |" \
	"$mp/.shardfs/metrics" >"$tmp"; then
	rm -f "$out"
	echo "$0: cannot read $mp/.shardfs/metrics" >&2
	exit 1
fi
chmod 0644 "$tmp"
mv -f "$tmp" "$out"
