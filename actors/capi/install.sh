#!/usr/bin/env bash
# Installs libtaskfold (shared and static), taskfold.h, the Fortran module,
# taskfold.pc and the CMake package under a prefix:
#
#   actors/capi/install.sh /opt/taskfold            # builds with --release
#   actors/capi/install.sh --lib-dir target/debug /tmp/tf   # a build you made
#
# then `PKG_CONFIG_PATH=/opt/taskfold/lib/pkgconfig pkg-config --cflags
# --libs taskfold`, or CMake's `find_package(taskfold)` with
# `-DCMAKE_PREFIX_PATH=/opt/taskfold`. See the book's chapter Embedding
# from C and Fortran.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib_dir=""
if [ "${1:-}" = "--lib-dir" ]; then
  lib_dir="$(cd "$2" && pwd)"
  shift 2
fi
if [ $# -ne 1 ]; then
  echo "usage: $0 [--lib-dir DIR] PREFIX" >&2
  exit 2
fi
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
if [ -z "$lib_dir" ]; then
  (cd "$here/../.." && cargo build --release -p taskfold-capi --lib)
  lib_dir="$(cd "$here/../.." && pwd)/target/release"
fi
for f in libtaskfold_capi.so libtaskfold_capi.a; do
  [ -f "$lib_dir/$f" ] || { echo "$0: no $f in $lib_dir" >&2; exit 1; }
done
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../../Cargo.toml" | head -1)"
# What a static link needs beside libtaskfold.a on Linux (the Rust
# standard library's system libraries).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

install -d "$prefix/lib/pkgconfig" "$prefix/lib/cmake/taskfold" "$prefix/include" \
  "$prefix/share/taskfold/fortran"
install -m 0755 "$lib_dir/libtaskfold_capi.so" "$prefix/lib/libtaskfold.so"
install -m 0644 "$lib_dir/libtaskfold_capi.a" "$prefix/lib/libtaskfold.a"
install -m 0644 "$here/include/taskfold.h" "$prefix/include/taskfold.h"
install -m 0644 "$here/fortran/taskfold.f90" "$prefix/share/taskfold/fortran/taskfold.f90"
# The module file is the compiler's own format: made with this machine's
# gfortran, if it has one (others compile taskfold.f90 with the program).
if command -v gfortran >/dev/null 2>&1; then
  tmp="$(mktemp -d)"
  gfortran -std=f2018 -c "$here/fortran/taskfold.f90" -J "$tmp" -o "$tmp/taskfold.o"
  install -m 0644 "$tmp/taskfold.mod" "$prefix/include/taskfold.mod"
  ar rcs "$prefix/lib/libtaskfold_fortran.a" "$tmp/taskfold.o"
  rm -rf "$tmp"
fi

cat > "$prefix/lib/pkgconfig/taskfold.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: taskfold
Description: Fault-tolerant non-blocking distributed reductions (C API)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltaskfold
Libs.private: $static_libs
PC

cat > "$prefix/lib/cmake/taskfold/taskfoldConfig.cmake" <<'CMAKE'
# find_package(taskfold): the imported targets taskfold::taskfold (shared),
# taskfold::static, and taskfold::fortran (the Fortran module, compiled
# by this prefix's gfortran; link it with taskfold::taskfold).
get_filename_component(_taskfold_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET taskfold::taskfold)
  add_library(taskfold::taskfold SHARED IMPORTED)
  set_target_properties(taskfold::taskfold PROPERTIES
    IMPORTED_LOCATION "${_taskfold_prefix}/lib/libtaskfold.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${_taskfold_prefix}/include")
  add_library(taskfold::static STATIC IMPORTED)
  set_target_properties(taskfold::static PROPERTIES
    IMPORTED_LOCATION "${_taskfold_prefix}/lib/libtaskfold.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_taskfold_prefix}/include"
    INTERFACE_LINK_LIBRARIES "gcc_s;util;rt;pthread;m;dl")
  if(EXISTS "${_taskfold_prefix}/lib/libtaskfold_fortran.a")
    add_library(taskfold::fortran STATIC IMPORTED)
    set_target_properties(taskfold::fortran PROPERTIES
      IMPORTED_LOCATION "${_taskfold_prefix}/lib/libtaskfold_fortran.a"
      INTERFACE_INCLUDE_DIRECTORIES "${_taskfold_prefix}/include"
      INTERFACE_LINK_LIBRARIES taskfold::taskfold)
  endif()
endif()
set(taskfold_INCLUDE_DIRS "${_taskfold_prefix}/include")
set(taskfold_LIBRARIES taskfold::taskfold)
CMAKE

cat > "$prefix/lib/cmake/taskfold/taskfoldConfigVersion.cmake" <<CMAKE
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CMAKE
echo "taskfold $version installed in $prefix"
