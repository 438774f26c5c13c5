#!/bin/sh
# A stand-in for a PYNQ-Z1's Python (32-bit ARM): Debian's armhf python3.11, python3-numpy 1.24 and
# python3-rich unpacked into a sysroot that qemu-arm (user mode) runs, with nothing else installed: no
# llvmlite, onnx, scipy, matplotlib.  tests/integration/test_board_emulated.py runs vtakit there.
# Needs root for apt (it adds the armhf architecture to apt's lists and installs qemu-user); it installs
# no armhf package into the system: `apt-get install python3:armhf` would replace the system's
# python3-minimal, so the packages are downloaded and unpacked with dpkg -x instead.
set -eu
DEST=${VTAKIT_ARMHF_SYSROOT:-$HOME/.cache/vtakit/armhf}
command -v qemu-arm >/dev/null || apt-get install -y -qq qemu-user
dpkg --print-foreign-architectures | grep -qx armhf || { dpkg --add-architecture armhf; apt-get update -qq; }
mkdir -p "$DEST/debs" "$DEST/root"
cd "$DEST/debs"
packages=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances --no-pre-depends python3.11:armhf python3-numpy:armhf libpython3.11-minimal:armhf 2>/dev/null \
  | grep -E '^[a-z0-9].*:armhf$' | sort -u \
  | grep -vE '^(debconf|dpkg|perl|tzdata|media-types|readline-common|libc-bin|gcc-12-base|install-info|ucf|debianutils|coreutils|sensible-utils)')
apt-get download $packages python3-rich python3-pygments python3-markdown-it python3-mdurl
for deb in *.deb; do dpkg -x "$deb" "$DEST/root"; done
# What Debian's alternatives would link: numpy's BLAS and LAPACK (OpenBLAS, as on PYNQ images)
lib="$DEST/root/usr/lib/arm-linux-gnueabihf"
for so in libblas.so.3 liblapack.so.3 libopenblas.so.0; do ln -sf "openblas-pthread/$so" "$lib/$so"; done
QEMU_LD_PREFIX="$DEST/root" qemu-arm "$DEST/root/usr/bin/python3.11" -c \
  "import numpy, platform, rich; print(platform.machine(), 'python', platform.python_version(), 'numpy', numpy.__version__)"
