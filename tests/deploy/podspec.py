"""Prints, as one JSON object, what a kubelet would do to start the Stockade container of a
manifest in deploy/ (a Deployment or an agent-sandbox SandboxTemplate): the container's command,
args (null when not set: the image's ENTRYPOINT and CMD then apply), working directory and
environment (in order, as [name, value] pairs), the pod's and container's security context, every volume mount with the volume it
mounts, and the probes with their ports resolved. The pod test (crates/stockade/tests/it/pod.rs)
reproduces that on this machine in namespaces.

    target/deploy-venv/bin/python tests/deploy/podspec.py deploy/kubernetes/deployment.yaml
"""

import json
import sys

import yaml


def pod_spec(doc: dict) -> dict:
    kind = doc.get("kind")
    if kind == "Deployment":
        return doc["spec"]["template"]["spec"]
    if kind == "SandboxTemplate":
        return doc["spec"]["podTemplate"]["spec"]
    raise SystemExit(f"podspec.py: no pod in a {kind}")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    pods = [pod_spec(d) for d in docs if d.get("kind") in ("Deployment", "SandboxTemplate")]
    if len(pods) != 1:
        raise SystemExit(f"podspec.py: expected one pod in {sys.argv[1]}, found {len(pods)}")
    pod = pods[0]
    (container,) = pod["containers"]
    psc = pod.get("securityContext", {})
    csc = container.get("securityContext", {})
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = []
    for m in container.get("volumeMounts", []):
        v = volumes[m["name"]]
        if "secret" in v:
            vol = {"kind": "secret", "secret": v["secret"]["secretName"],
                   "default_mode": v["secret"].get("defaultMode", 0o644)}
        elif "emptyDir" in v:
            vol = {"kind": "emptyDir", "size_limit": (v["emptyDir"] or {}).get("sizeLimit")}
        else:
            raise SystemExit(f"podspec.py: volume {m['name']} is neither a secret nor an emptyDir")
        mounts.append({"path": m["mountPath"], "read_only": bool(m.get("readOnly", False)), **vol})
    probes = []
    for name in ("startupProbe", "livenessProbe", "readinessProbe"):
        p = container.get(name)
        if not p:
            continue
        get = p["httpGet"]
        port = get["port"]
        probes.append({
            "probe": name,
            "path": get["path"],
            "port": ports[port] if isinstance(port, str) else port,
            "scheme": get.get("scheme", "HTTP"),
            "period_s": p.get("periodSeconds", 10),
            "failures": p.get("failureThreshold", 3),
        })
    env = []
    for e in container.get("env", []):
        if "value" not in e:
            raise SystemExit(f"podspec.py: env {e['name']} has no plain value (valueFrom is not modelled)")
        env.append([e["name"], str(e["value"])])
    limits = container.get("resources", {}).get("limits", {})
    print(json.dumps({
        "command": container.get("command"),
        "args": container.get("args"),
        "working_dir": container.get("workingDir"),
        "env": env,
        "ephemeral_storage_limit": limits.get("ephemeral-storage"),
        "run_as_user": csc.get("runAsUser", psc.get("runAsUser")),
        "run_as_group": csc.get("runAsGroup", psc.get("runAsGroup")),
        "fs_group": psc.get("fsGroup"),
        "read_only_root": bool(csc.get("readOnlyRootFilesystem", False)),
        "no_new_privs": csc.get("allowPrivilegeEscalation") is False,
        "grace_s": pod.get("terminationGracePeriodSeconds", 30),
        "mounts": mounts,
        "probes": probes,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
