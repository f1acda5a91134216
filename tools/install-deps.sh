#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs every Debian package coordfs needs to build, test and benchmark.
# Idempotent: packages already present are skipped quickly.
set -euo pipefail

pkgs=(
	build-essential meson ninja-build pkg-config
	fuse3 libfuse3-dev
	libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libtiff-dev libgif-dev
	libcurl4-openssl-dev libssl-dev libmicrohttpd-dev
	libjansson-dev libmount-dev libexpat1-dev
	check valgrind clang groff-base man-db universal-ctags
	python3-torch python3-torchvision python3-pil python3-numpy python3-matplotlib
	e2fsprogs util-linux attr curl passwd
	libxxhash-dev dmsetup
	nginx
	radosgw ceph-mon ceph-osd python3-boto3 rclone s3fs tinyproxy-bin
	slurm-client slurmctld slurmd munge dnsmasq-base iproute2
)

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	# Another install (a second checkout, a CI step) may hold the lock: wait for it.
	apt-get -o DPkg::Lock::Timeout=900 update -q
	apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
fi
# /dev/fuse must exist for the mount tests.
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
