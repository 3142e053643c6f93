#!/usr/bin/env python3
"""The Kubernetes example's pods, read for containers.sh (issue 17).

  k8s_pods.py MANIFEST check      the pods ask for nothing privileged (exit 1, saying what, if they do)
  k8s_pods.py MANIFEST args POD   the pod's container args, NUL-separated, to run under podman

So the test runs the manifest's own commands, and a manifest that came to need
privileges, devices or the host's network would fail it.
"""
import sys

import yaml

UNPRIVILEGED_USER = 65534


def pods(manifest):
    with open(manifest) as f:
        return {d["metadata"]["name"]: d for d in yaml.safe_load_all(f) if d and d["kind"] == "Pod"}


def privileges(pod):
    """What in `pod` asks for more than an unprivileged container has."""
    spec = pod["spec"]
    found = [key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    pod_security = spec.get("securityContext", {})
    if pod_security.get("runAsNonRoot") is not True or pod_security.get("runAsUser") != UNPRIVILEGED_USER:
        found.append(f"not runAsNonRoot as uid {UNPRIVILEGED_USER}")
    found += [f"volume {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    for container in spec["containers"]:
        security = container.get("securityContext", {})
        if security.get("privileged"):
            found.append("privileged")
        if security.get("allowPrivilegeEscalation") is not False:
            found.append("allowPrivilegeEscalation not false")
        capabilities = security.get("capabilities", {})
        if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
            found.append(f"capabilities {capabilities}")
        # Only CPU and memory: an RDMA device plugin's resource would show here.
        for kind in ("limits", "requests"):
            extra = set(container.get("resources", {}).get(kind, {})) - {"cpu", "memory"}
            found += [f"resource {name}" for name in sorted(extra)]
    return found


def main(manifest, command, *args):
    all_pods = pods(manifest)
    if command == "check":
        bad = {name: found for name, pod in all_pods.items() if (found := privileges(pod))}
        for name, found in bad.items():
            print(f"k8s_pods: pod {name}: {', '.join(found)}", file=sys.stderr)
        return 1 if bad or not all_pods else 0
    if command == "args":
        sys.stdout.write("\0".join(all_pods[args[0]]["spec"]["containers"][0]["args"]) + "\0")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
