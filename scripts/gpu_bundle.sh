#!/usr/bin/env bash
# Prepare, on a networked Debian 12 machine, what scripts/gpu_check.sh needs on a GPU machine
# that has CUDA, CMake and PyTorch but none of our Debian libraries and no network:
#   .gpu_bundle/debs/  the .deb files (apt-get download: no root, nothing installed here)
#   .gpu_bundle/root/  the same, unpacked with dpkg -x and pruned (docs, man pages, static libs)
# .gpu_bundle/ is git-ignored. Copy ".gpu_bundle/debs" (about 20 MiB) to the GPU machine with the
# tree, and gpu_check.sh unpacks it there with --unpack; or copy ".gpu_bundle/root" as is
# (docs/cuda.md).
# Usage: scripts/gpu_bundle.sh            download, unpack, prune (fails above 60 MiB unpacked)
#        scripts/gpu_bundle.sh --unpack   only unpack and prune existing debs (no network)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu_bundle
limit_mib=60

# Build-time (headers, .so links, pkg-config, mpicc) and run-time closure of libyaml, xxhash,
# Open MPI, OpenBLAS and PCRE2, minus what every CUDA base image has (libc, libstdc++, zlib...).
packages=(
  libyaml-0-2 libyaml-dev libxxhash0 libxxhash-dev
  libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
  libpcre2-8-0 libpcre2-dev
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7
  libfabric1 libucx0 libibverbs1 librdmacm1 libnuma1 libpsm2-2 libpsm-infinipath1
  libnl-3-200 libnl-route-3-200 libmunge2 libltdl7 libpciaccess0
  pkgconf pkgconf-bin libpkgconf3
)

if [ "${1:-}" != "--unpack" ]; then
  rm -rf "$out/debs"
  mkdir -p "$out/debs"
  # apt's sandbox user cannot write here; the download itself needs no privileges.
  (cd "$out/debs" && apt-get download -q -o APT::Sandbox::User=root "${packages[@]}" >/dev/null)
fi
ls "$out"/debs/*.deb >/dev/null 2>&1 || { echo "gpu bundle: no debs in $out/debs" >&2; exit 1; }
rm -rf "$out/root"
mkdir -p "$out/root"
for deb in "$out"/debs/*.deb; do
  if command -v dpkg >/dev/null; then
    dpkg -x "$deb" "$out/root"
  else # an image without dpkg: a .deb is an ar archive holding data.tar.*
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$OLDPWD/$deb" && tar -xf data.tar.* -C "$OLDPWD/$out/root")
    rm -rf "$tmp"
  fi
done

# Prune what neither the build nor a run reads.
r="$out/root"
rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/lintian" "$r/usr/share/info" \
       "$r/usr/share/locale" "$r/usr/share/bug"
find "$r" -name '*.a' -delete
# LAPACK, Fortran modules and Open MPI's internal headers: nothing here includes or links them.
rm -rf "$r/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so"* \
       "$r/usr/lib/x86_64-linux-gnu/openblas-pthread/cmake" "$r/usr/lib/x86_64-linux-gnu/fortran" \
       "$r/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi"
mkdir -p "$r/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi" # mpicc -showme still names it
# Fortran and C++ MPI bindings: Trestle is C only.
find "$r" \( -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' \
             -o -name 'libmpi_cxx*' -o -name '*.mod' \) -delete

# dpkg -x skips maintainer scripts, so Debian's alternatives links are missing: make the ones the
# build looks for, relative so the tree can move.
lib="$r/usr/lib/x86_64-linux-gnu"
[ -e "$lib/libopenblas.so" ] || ln -s openblas-pthread/libopenblas.so "$lib/libopenblas.so"
[ -e "$lib/libopenblas.so.0" ] || ln -s openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
[ -e "$r/usr/bin/mpirun" ] || ln -s orterun "$r/usr/bin/mpirun"
[ -e "$r/usr/bin/mpiexec" ] || ln -s orterun "$r/usr/bin/mpiexec"
[ -e "$r/usr/bin/mpicc" ] || ln -s opal_wrapper "$r/usr/bin/mpicc"
[ -e "$r/usr/include/x86_64-linux-gnu/mpi.h" ] ||
  ln -s ../../lib/x86_64-linux-gnu/openmpi/include/mpi.h "$r/usr/include/x86_64-linux-gnu/mpi.h"

kib=$(du -sk "$r" | cut -f1)
deb_kib=$(du -sk "$out/debs" | cut -f1)
echo "gpu bundle: ${#packages[@]} packages, unpacked $((kib / 1024)) MiB in $r," \
     "debs $((deb_kib / 1024)) MiB"
if ((kib / 1024 > limit_mib)); then
  echo "gpu bundle: over the ${limit_mib} MiB limit; prune more" >&2
  exit 1
fi
