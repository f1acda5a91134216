#!/bin/bash
# SPDX-License-Identifier: MIT
# rgw-up.sh: start a throwaway S3 server on loopback for tests and benchmarks:
# a single-node Ceph cluster (one mon, no mgr, one OSD on memstore or bluestore)
# with radosgw in front, from Debian's radosgw, ceph-mon and ceph-osd packages.
#
# Every file (config, data, logs, sockets, pid files) lives under $RGW_DIR and
# nothing listens beyond 127.0.0.1, so several instances run side by side.
# On success it prints one line of shell to eval:
#   export RGW_DIR=... S3_ENDPOINT=http://127.0.0.1:PORT AWS_ACCESS_KEY_ID=...
#          AWS_SECRET_ACCESS_KEY=... AWS_DEFAULT_REGION=us-east-1
# and rgw-down.sh (with that RGW_DIR) stops it. On failure it prints the logs'
# tails, tears everything down and exits non-zero.
#
# Environment (all optional):
#   RGW_DIR        where everything lives; default: a fresh mktemp directory
#   RGW_PORT       S3 port; MON_PORT: the mon's port; default: free ports
#   RGW_OSD_STORE  memstore (default; data in the OSD's RAM, ~2.4x the bytes)
#                  or bluestore (sparse 10 GiB file, slower start, bounded RAM)
#   RGW_TIMEOUT    seconds to wait for each step (60)
#   S3_ACCESS_KEY, S3_SECRET_KEY  the test user's keys (testkey / testsecret)
set -euo pipefail

free_port() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

D=${RGW_DIR:-$(mktemp -d /tmp/coordfs-rgw.XXXXXX)}
RGW_PORT=${RGW_PORT:-$(free_port)}
MON_PORT=${MON_PORT:-$(free_port)}
TMO=${RGW_TIMEOUT:-60}
AK=${S3_ACCESS_KEY:-testkey}
SK=${S3_SECRET_KEY:-testsecret}
C=$D/ceph.conf
HERE=$(cd "$(dirname "$0")" && pwd)

fail() {
	echo "rgw-up: $*" >&2
	for f in "$D"/log/*.log; do
		[ -s "$f" ] && { echo "== $f" >&2; tail -n 20 "$f" >&2; }
	done
	RGW_DIR=$D "$HERE/rgw-down.sh"
	exit 1
}

for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph; do
	command -v "$b" >/dev/null || { echo "rgw-up: $b not found (run tools/install-deps.sh)" >&2; exit 1; }
done
# A given RGW_DIR must be new or empty: we delete it at the end.
if [ -e "$D/ceph.conf" ]; then
	echo "rgw-up: $D already holds a cluster (run rgw-down.sh first)" >&2
	exit 1
fi
if curl -s -o /dev/null "http://127.0.0.1:$RGW_PORT/"; then
	echo "rgw-up: port $RGW_PORT is in use" >&2
	exit 1
fi
mkdir -p "$D"/run "$D"/log "$D"/mon.a "$D"/osd.0 "$D"/rgw "$D"/crash

case ${RGW_OSD_STORE:-memstore} in
memstore)
	STORE="osd_objectstore = memstore
memstore_device_bytes = 4294967296" ;;
bluestore)
	STORE="osd_objectstore = bluestore
bluestore_block_path = $D/osd.\$id/block.file
bluestore_block_create = true
bluestore_block_size = 10737418240
osd_memory_target = 939524096" ;;
*) fail "RGW_OSD_STORE must be memstore or bluestore" ;;
esac

FSID=$(cat /proc/sys/kernel/random/uuid)
cat >"$C" <<CONF
[global]
fsid = $FSID
mon_host = v2:127.0.0.1:$MON_PORT
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# without this radosgw waits forever for a "secure" mon session
ms_mon_client_mode = crc
run_dir = $D/run
admin_socket = $D/run/\$name.asok
pid_file = $D/run/\$name.pid
log_file = $D/log/\$name.log
mon_cluster_log_file = $D/log/cluster.log
crash_dir = $D/crash
# commit map changes at once rather than batching them each second: fast start
paxos_propose_interval = 0.01
paxos_min_wait = 0.001
mon_data = $D/mon.\$id
mon_data_avail_warn = 2
mon_data_avail_crit = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
osd_crush_initial_weight = 1
osd_data = $D/osd.\$id
$STORE
[client]
rgw_data = $D/rgw
# tcp_nodelay: without it small GETs stall on Nagle vs delayed ACKs
rgw_frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw_thread_pool_size = 64
CONF

monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$D/monmap" >/dev/null ||
	fail "monmaptool failed"
ceph-mon -c "$C" -i a --mkfs --monmap "$D/monmap" || fail "mon mkfs failed"
ceph-mon -c "$C" -i a || fail "mon start failed"
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$(timeout "$TMO" ceph -c "$C" osd new "$OSD_UUID") || fail "osd new failed"
ceph-osd -c "$C" -i "$OSD_ID" --mkfs --osd-uuid "$OSD_UUID" >/dev/null 2>&1 || fail "osd mkfs failed"
ceph-osd -c "$C" -i "$OSD_ID" 2>/dev/null || fail "osd start failed"
radosgw -c "$C" -n client.rgw || fail "radosgw start failed"
end=$((SECONDS + TMO))
until curl -sf -o /dev/null "http://127.0.0.1:$RGW_PORT/"; do
	[ $SECONDS -lt $end ] || fail "radosgw did not answer on port $RGW_PORT within ${TMO}s"
	if [ -f "$D/run/client.rgw.pid" ] && ! kill -0 "$(cat "$D/run/client.rgw.pid")" 2>/dev/null; then
		fail "radosgw exited"
	fi
	sleep 0.1
done
timeout "$TMO" radosgw-admin -c "$C" user create --uid=test --display-name=test \
	--access-key="$AK" --secret-key="$SK" >/dev/null || fail "user create failed"
echo "export RGW_DIR=$D S3_ENDPOINT=http://127.0.0.1:$RGW_PORT AWS_ACCESS_KEY_ID=$AK" \
	"AWS_SECRET_ACCESS_KEY=$SK AWS_DEFAULT_REGION=us-east-1 CEPH_CONF=$C"
