#!/bin/bash
# SPDX-License-Identifier: MIT
# rgw-down.sh: stop the cluster rgw-up.sh started in $RGW_DIR (or the first
# argument) and delete that directory. Only processes whose pid file lies in
# the directory and whose command line names its ceph.conf are signalled, so
# other instances on the machine are never touched. Order: radosgw (its clean
# exit needs the OSD), the OSD (it waits for the mon to mark itself down),
# then the mon; each gets SIGTERM, then SIGKILL after 3 s.
D=${1:-${RGW_DIR:-}}
if [ -z "$D" ]; then
	echo "usage: rgw-down.sh RGW_DIR (or set RGW_DIR)" >&2
	exit 2
fi
alive() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) && [ "${st%% *}" != Z ]
}
ours() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "-c $D/ceph.conf"; }
stop() {
	local f p pids=() left=()
	for f in "$@"; do
		[ -f "$f" ] || continue
		p=$(cat "$f")
		[[ $p =~ ^[0-9]+$ ]] || continue
		alive "$p" && ours "$p" && kill -TERM "$p" && pids+=("$p")
	done
	[ ${#pids[@]} -eq 0 ] && return
	for _ in $(seq 30); do
		left=()
		for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
		[ ${#left[@]} -eq 0 ] && return
		sleep 0.1
	done
	kill -KILL "${left[@]}" 2>/dev/null
}
if [ -d "$D/run" ]; then
	stop "$D"/run/client.rgw.pid
	stop "$D"/run/osd.*.pid
	stop "$D"/run/mon.*.pid
fi
# Only ever delete what looks like one of our clusters.
if [ -f "$D/ceph.conf" ] || [ -d "$D/run" ]; then
	rm -rf "$D"
elif [ -d "$D" ] && [ -z "$(ls -A "$D")" ]; then
	rmdir "$D"
fi
