"""Validate deploy/ offline: every manifest under deploy/kubernetes/ against the Kubernetes
OpenAPI schemas bundled with kubernetes-validate (strict: unknown fields are errors), and the
agent-sandbox SandboxTemplate under deploy/agent-sandbox/: its kind and group, its pod template
validated as a Kubernetes Pod, and its pod spec equal to the Deployment's (one pod, two ways to
schedule it).

    target/deploy-venv/bin/python tests/deploy/validate.py [DEPLOY_DIR]

Prints one line per resource and `ok` at the end; exit status 1 with the reasons otherwise.
Used by crates/stockade/tests/it/remote_deploy.rs (which also feeds it broken copies).
"""

import pathlib
import sys

import kubernetes_validate
import yaml

VERSION = "1.37.0"


def check(resource: dict, where: str, errors: list) -> None:
    try:
        kubernetes_validate.validate(resource, VERSION, strict=True)
        print(f"valid {resource['kind']}/{resource['metadata']['name']} ({where})")
    except Exception as e:  # the validator's own error types differ per failure
        errors.append(f"{where}: {resource.get('kind')}: {e}")


def policy(spec: dict) -> list:
    """What the deployment promises beyond schema validity (docs/deploy.md)."""
    errors = []
    c = spec["containers"][0]
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        errors.append("the liveness probe must GET /healthz")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
        errors.append("the readiness probe must GET /readyz")
    if not spec.get("securityContext", {}).get("runAsNonRoot"):
        errors.append("the pod must run as non-root")
    sc = c.get("securityContext", {})
    if sc.get("allowPrivilegeEscalation") is not False or "ALL" not in sc.get("capabilities", {}).get("drop", []):
        errors.append("the container must drop all capabilities and privilege escalation")
    if "requests" not in c.get("resources", {}):
        errors.append("the container must request resources")
    # The daemon's shutdown terminates every tree (2 s grace each, concurrently) and flushes.
    if spec.get("terminationGracePeriodSeconds", 30) < 10:
        errors.append("terminationGracePeriodSeconds must leave the terminate routine time (>= 10)")
    return errors


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "deploy")
    errors: list = []
    pod_specs = {}
    manifests = sorted((root / "kubernetes").glob("*.yaml"))
    if not manifests:
        errors.append(f"no manifests in {root / 'kubernetes'}")
    for path in manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            check(doc, str(path), errors)
            if doc.get("kind") == "Deployment":
                pod_specs["Deployment"] = doc["spec"]["template"]["spec"]
    for path in sorted((root / "agent-sandbox").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc.get("apiVersion") != "extensions.agents.x-k8s.io/v1alpha1" or doc.get("kind") != "SandboxTemplate":
                errors.append(f"{path}: not an extensions.agents.x-k8s.io/v1alpha1 SandboxTemplate")
                continue
            extra = set(doc["spec"]) - {"podTemplate", "networkPolicy", "networkPolicyManagement"}
            if extra:
                errors.append(f"{path}: unknown SandboxTemplate spec fields {sorted(extra)}")
            template = doc["spec"]["podTemplate"]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": doc["metadata"]["name"], **template.get("metadata", {})},
                "spec": template["spec"],
            }
            check(pod, f"{path} podTemplate", errors)
            pod_specs["SandboxTemplate"] = template["spec"]
    for kind, spec in pod_specs.items():
        errors.extend(f"{kind}: {e}" for e in policy(spec))
    if len(pod_specs) == 2 and pod_specs["Deployment"] != pod_specs["SandboxTemplate"]:
        errors.append("the SandboxTemplate's pod spec differs from the Deployment's")
    for e in errors:
        print(f"invalid: {e}")
    if errors:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
