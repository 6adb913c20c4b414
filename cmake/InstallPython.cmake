# SPDX-License-Identifier: Apache-2.0
# InstallPython.cmake - install script (install(SCRIPT), run by
# `cmake --install` and cpack) that puts the shardfs Python package where
# the python3 that runs shardfs-pace imports from, for the prefix of this
# install: the prefix is only known at install time (cpack installs to
# /usr, `cmake --install --prefix` anywhere), so the directory is chosen
# here, not at configure time.
#
# Set before it runs (install(CODE) in Packaging.cmake):
#   SHARDFS_PYTHON3         the interpreter of shardfs-pace's #! line
#   SHARDFS_PYTHON_SOURCE   python/shardfs of the source tree
#   SHARDFS_PYTHON_PACKAGE_DIR      a directory chosen by hand (relative to the
#                           prefix, or absolute), or empty
#
# The rule, without SHARDFS_PYTHON_PACKAGE_DIR:
#   /usr: lib/python3/dist-packages, Debian's directory for the system's
#         packages (the .deb; no interpreter needed to know it);
#   else: the first directory on that python3's sys.path under
#         PREFIX/lib/ that ends in -packages (Debian's python3 searches
#         /usr/local/lib/python3.X/dist-packages), or, when it searches
#         none there, sysconfig's purelib for the prefix (posix_prefix:
#         PREFIX/lib/python3.X/site-packages), which PYTHONPATH must name.
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(dir "${SHARDFS_PYTHON_PACKAGE_DIR}")
if(NOT dir AND prefix STREQUAL "/usr")
  set(dir lib/python3/dist-packages)
elseif(NOT dir)
  execute_process(
    COMMAND "${SHARDFS_PYTHON3}" -c "
import sys, sysconfig
p = sys.argv[1].rstrip('/') + '/lib/'
on_path = [d for d in sys.path if d.startswith(p) and d.endswith('-packages')]
print(on_path[0] if on_path else sysconfig.get_path(
    'purelib', 'posix_prefix', vars={'base': sys.argv[1], 'platbase': sys.argv[1]}))
" "${prefix}"
    OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc OR NOT dir)
    message(FATAL_ERROR "${SHARDFS_PYTHON3} cannot say where the Python package "
                        "goes under ${prefix}; set -DSHARDFS_PYTHON_PACKAGE_DIR=")
  endif()
endif()
if(NOT IS_ABSOLUTE "${dir}")
  set(dir "${prefix}/${dir}")
endif()
message(STATUS "Python package for ${SHARDFS_PYTHON3}: ${dir}/shardfs")
file(INSTALL "${SHARDFS_PYTHON_SOURCE}" DESTINATION "${dir}"
     FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)
