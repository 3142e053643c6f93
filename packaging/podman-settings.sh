# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this
# Sourced by packaging/build-image.sh and tests/install/containers.sh: how they
# call podman, and why (docs/decisions/containers.md, "podman on this machine").
#
# runc rather than Debian 12's default crun: crun 1.8 refuses a hybrid cgroup
# layout whose cgroup2 hierarchy has a controller enabled ("cgroups in hybrid
# mode not supported"), which is what CI's kernel has (cgroup v1, and hugetlb on
# cgroup2); runc runs containers on v1, hybrid and v2 alike.
podman=(podman --runtime runc)

# Rootful podman raises a container's limits to nofile 1048576 by default, which
# needs CAP_SYS_RESOURCE; CI's root has no such capability ("setrlimit
# RLIMIT_NOFILE: Operation not permitted"). These lower limits work everywhere
# and are plenty for verbs programs (a few dozen descriptors, a few threads).
podman_limits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
