# SPDX-License-Identifier: Apache-2.0
# Packaging.cmake - what `cmake --install` installs besides the programs,
# the manual pages, and the Debian package that `cpack -G DEB` builds from
# all the install rules.
#
# Include it from the top CMakeLists.txt after every target is defined
# (near the end), so that if(TARGET ...) sees the optional programs:
#
#   include(cmake/Packaging.cmake)
#
# Installed layout (prefix /usr/local by default, /usr in the package):
#   bin/shardfs, bin/shardfs-index, bin/shardfs-pack   the programs that are built
#   bin/shardfs-pace                                   the Python command
#   lib/python3/dist-packages/shardfs/                 the Python package, for
#                                                      Debian's python3 (under
#                                                      /usr/local: lib/python3.X/
#                                                      dist-packages, see below)
#   share/man/man1/<program>.1.gz                      their manual pages
#   share/doc/shardfs/README.md, *.md                  README.md and docs/*.md
#   share/doc/shardfs/copyright, changelog.gz          Debian's machine-readable
#                                                      copyright file, the changelog
#   share/doc/shardfs/examples/                        packaging/: fstab, systemd,
#                                                      Kubernetes and metrics examples
#                                                      (the collector executable)
#
# The Python package goes where the python3 of shardfs-pace's #! line
# (/usr/bin/python3) imports from under the prefix of the install:
# /usr/lib/python3/dist-packages in the .deb, /usr/local/lib/python3.X/
# dist-packages for `cmake --install` to /usr/local (cmake/InstallPython.cmake
# says how it is chosen; -DSHARDFS_PYTHON_PACKAGE_DIR= overrides it).
#
# Each program is installed by the install(TARGETS) next to its
# add_executable(); this file adds its manual page.  A program without an
# install rule is caught by tests/integration/test_package.py, which checks
# that the package holds every program of the build.
#
# mount(8) runs `mount.fuse3` for `-t fuse.shardfs`, and that helper runs
# `shardfs` from $PATH: installing the program to bin/ is all mount(8) and
# fstab need; no /sbin/mount.fuse.shardfs link is required.
include_guard(GLOBAL)
include(GNUInstallDirs)

# The Maintainer of the Debian package and of its changelog.  A
# placeholder address (lintian refuses localhost): set your own with
# -DSHARDFS_DEB_MAINTAINER="Name <address>".
set(SHARDFS_DEB_MAINTAINER "shardfs maintainers <shardfs@example.org>"
    CACHE STRING "Maintainer field of the Debian package")

# The programs of the project.  shardfs-index and shardfs-pack are optional
# parts of the build; whichever exists gets its manual page.
set(SHARDFS_PROGRAMS shardfs shardfs-index shardfs-pack)
set(SHARDFS_PYTHON_PACKAGE_DIR "" CACHE STRING
    "Where the shardfs Python package is installed (relative to the prefix, or
absolute); empty: where shardfs-pace's python3 looks (InstallPython.cmake)")
# The interpreter of shardfs-pace's #! line, asked where it imports from.
set(SHARDFS_PYTHON3 /usr/bin/python3 CACHE FILEPATH
    "The python3 that runs shardfs-pace (its #! line)")

find_program(SHARDFS_GZIP gzip REQUIRED)
# The date printed at the foot of every manual page; string(TIMESTAMP)
# honours SOURCE_DATE_EPOCH, so a package build can make it reproducible.
string(TIMESTAMP SHARDFS_MAN_DATE "%Y-%m-%d" UTC)

# Generate docs/man/NAME.1.in into man/NAME.1 (configure time: @VERSION@ and
# @DATE@ substituted), compress it into man/NAME.1.gz at build time (Debian
# installs manual pages compressed, gzip -n so the bytes do not depend on
# the build time) and install that.  Returns the .gz path in OUT.
function(shardfs_add_man_page name out)
  set(VERSION ${PROJECT_VERSION})	# local to this function: @VERSION@
  set(DATE ${SHARDFS_MAN_DATE})		# and @DATE@ of the .in file
  set(src ${PROJECT_SOURCE_DIR}/docs/man/${name}.1.in)
  set(page ${PROJECT_BINARY_DIR}/man/${name}.1)
  configure_file(${src} ${page} @ONLY)
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${SHARDFS_GZIP} -9 -n -k -f ${page}
    DEPENDS ${page}
    COMMENT "Compressing manual page ${name}(1)"
    VERBATIM)
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  set(${out} ${page}.gz PARENT_SCOPE)
endfunction()

set(man_pages)
foreach(program IN LISTS SHARDFS_PROGRAMS)
  if(TARGET ${program})
    shardfs_add_man_page(${program} page)
    list(APPEND man_pages ${page})
  endif()
endforeach()
# Part of `all`, so a plain build leaves the pages in build/man/ for
# `man -l build/man/shardfs.1` and for the tests that check them.
shardfs_add_man_page(shardfs-pace page)
list(APPEND man_pages ${page})
add_custom_target(man ALL DEPENDS ${man_pages})

# The Python package and its command.  pip builds the same package from
# python/pyproject.toml; the .deb has no pip, so the files are copied and
# postinst byte-compiles them as dh_python3 would.
install(CODE "set(SHARDFS_PYTHON3 \"${SHARDFS_PYTHON3}\")
set(SHARDFS_PYTHON_SOURCE \"${PROJECT_SOURCE_DIR}/python/shardfs\")
set(SHARDFS_PYTHON_PACKAGE_DIR \"${SHARDFS_PYTHON_PACKAGE_DIR}\")")
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/InstallPython.cmake)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/packaging/deb/shardfs-pace
        DESTINATION ${CMAKE_INSTALL_BINDIR})

# Documentation: README.md and docs/*.md into share/doc/shardfs, and the
# deployment examples of packaging/ beside them.  The Dockerfile builds
# from a source tree, so it is no use to someone holding the package.
file(GLOB shardfs_docs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${shardfs_docs}
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/packaging/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        PATTERN "Dockerfile*" EXCLUDE
        PATTERN "deb" EXCLUDE
        PATTERN "*.sh" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
                                   GROUP_READ GROUP_EXECUTE
                                   WORLD_READ WORLD_EXECUTE)

# Debian's copyright file (DEP-5: every license of the source tree, the
# third-party test data included) and changelog (lintian's no-changelog
# error otherwise), compressed as Debian installs it.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/deb/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
configure_file(${PROJECT_SOURCE_DIR}/packaging/deb/changelog.in
               ${PROJECT_BINARY_DIR}/deb/changelog @ONLY)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/deb/changelog.gz
  COMMAND ${SHARDFS_GZIP} -9 -n -k -f ${PROJECT_BINARY_DIR}/deb/changelog
  DEPENDS ${PROJECT_BINARY_DIR}/deb/changelog
  COMMENT "Compressing the Debian changelog"
  VERBATIM)
add_custom_target(deb-changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/deb/changelog.gz)
install(FILES ${PROJECT_BINARY_DIR}/deb/changelog.gz
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---------------------------------------------------------------------------
# CPack: `cpack -G DEB` in the build directory writes
# shardfs_<version>_<arch>.deb, installing to /usr.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME shardfs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${SHARDFS_DEB_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "mount WebDataset TAR shards as a read-only directory tree")
# The extended description; CPack puts the summary above it and formats
# the lines (and the empty line, as " .") the way debian/control wants.
set(CPACK_PACKAGE_DESCRIPTION
"shardfs is a FUSE filesystem that mounts a set of TAR shards (the
WebDataset format: shard-000000.tar ... holding key.jpg, key.json,
key.cls) as one ordinary read-only directory tree, so that training code
that walks directories runs unmodified while the storage sees one open
per shard and large sequential reads.

It builds an in-memory index from the tar headers at mount time and reads
file data straight from the shards. mount -t fuse.shardfs and fstab
entries work through mount.fuse3.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)	# shardfs_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The library dependencies are computed by dpkg-shlibdeps from what the
# programs link (a hand-written list named libarchive13, which nothing
# linked, and would miss a library added later).  Added by hand: fuse3,
# not a library dependency, brings fusermount3 (to unmount) and
# mount.fuse3 (for mount -t fuse.shardfs and fstab); python3 runs
# shardfs-pace and the Python package, whose torch side is recommended.
# tests/integration/test_package.py checks that Depends names the package
# of every shared library the packaged programs load, and nothing else.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3, python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "python3-torch, python3-torchvision, python3-pil, python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/deb/postinst;${PROJECT_SOURCE_DIR}/packaging/deb/prerm")

include(CPack)
