#!/usr/bin/env bash
# Install the Debian packages qimg needs to build and test, when missing.
# Run as root (CI and `make run` do); otherwise print what to install.
set -euo pipefail

pkgs=(build-essential pkg-config meson ninja-build libglib2.0-dev zlib1g-dev
      libzstd-dev libcmocka-dev qemu-utils clang libclang-rt-14-dev
      clang-format)
# crypto/: LUKS and qcow's AES on GnuTLS (ciphers, PBKDF2, random bytes)
pkgs+=(libgnutls28-dev)
# What the tests run besides the oracle (qemu-utils: qemu-img, qemu-io,
# qemu-nbd): python3 (iotests, scripts/run-tests.sh), and the NBD, io_uring
# and fio tools that tests may require.  Under CI=true a test whose tool is
# missing fails instead of skipping, so CI must have all of them.
# libvhdi-utils (vhdiinfo) and python3-libvhdi: an independent VHD/VHDX reader.
pkgs+=(libvhdi-utils python3-libvhdi)
pkgs+=(python3 nbdkit nbdkit-plugin-dev libnbd-dev libnbd-bin liburing-dev fio openssl)
# strace: what a tool asks of the kernel or a server, compared with QEMU's
# (the locks of 025, copy_file_range in 178, the ssh server's fsyncs in 179)
pkgs+=(strace)
# cryptsetup, the independent reader of the LUKS headers qimg writes
pkgs+=(cryptsetup-bin)
# python3-cryptography: the crash explorer's own LUKS reader (iotests/crash)
pkgs+=(python3-cryptography)
# libvmdk (libyal), the independent VMDK reader of the iotests: vmdkinfo
# and its Python binding (pyvmdk) for the data.
pkgs+=(libvmdk-utils python3-libvmdk)
# Ceph RBD images: librbd and librados to build block/rbd.c (meson option
# rbd), a one-machine cluster for the tests (scripts/ceph-micro.sh: monitor
# and OSDs; ceph-common has the ceph and rbd tools) and QEMU's block
# modules, so that qemu-img reaches RBD as the oracle on the same cluster.
pkgs+=(librbd-dev librados-dev ceph-mon ceph-osd ceph-common qemu-block-extra uuid-runtime)
# Images over SSH: libssh to build block/ssh.c (meson option ssh), and for
# iotests 179-180 a private sshd (openssh-server; its service is not
# needed) and nss_wrapper (libssh takes ~ from the password database, so
# the tests give the tools a home of their own)
pkgs+=(libssh-dev openssh-server openssh-client libnss-wrapper)
# A real QEMU for the savevm/loadvm interop tests (QIMG_NO_QEMU_SYSTEM=1 does
# not install it; those tests then skip, and under CI=true fail).
[ "${QIMG_NO_QEMU_SYSTEM:-0}" = 1 ] || pkgs+=(qemu-system-x86)

# one dpkg-query for all (make test comes here once per build)
# (it exits 1 when it knows a package not at all: that one is missing too)
installed=" $({ dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null || :; } |
    awk '$NF == "installed" && $(NF - 1) == "ok" {printf "%s ", $1}')"
missing=()
for p in "${pkgs[@]}"; do
    [[ "$installed" == *" $p "* ]] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "qimg needs these Debian packages: ${missing[*]}" >&2
    echo "Run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "Installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
