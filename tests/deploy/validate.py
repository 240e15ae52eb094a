"""Validate deploy/ offline: every manifest under deploy/kubernetes/ against the Kubernetes
OpenAPI schemas bundled with kubernetes-validate (strict: unknown fields are errors), and the
agent-sandbox SandboxTemplate under deploy/agent-sandbox/: its kind and group, its pod template
validated as a Kubernetes Pod, and its pod spec equal to the Deployment's (one pod, two ways to
schedule it). With `--crd FILE` (the published agent-sandbox CRD
`extensions.agents.x-k8s.io_sandboxtemplates.yaml`) the SandboxTemplate is also validated against
the CRD's `openAPIV3Schema` for its version, strictly as the API server does (unknown fields are
errors), with `jsonschema`.

    target/deploy-venv/bin/python tests/deploy/validate.py [--crd FILE] [DEPLOY_DIR]

Prints one line per resource and `ok` at the end; exit status 1 with the reasons otherwise.
Used by crates/stockade/tests/it/remote_deploy.rs (which also feeds it broken copies).
"""

import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml

VERSION = "1.37.0"
# The agent-sandbox version the template is written for: the CRD's storage version, and the
# fields of its SandboxTemplate spec (checked even without --crd; --crd checks everything).
API_VERSION = "extensions.agents.x-k8s.io/v1beta1"
SPEC_FIELDS = {
    "podTemplate",
    "networkPolicy",
    "networkPolicyManagement",
    "envVarsInjectionPolicy",
    "service",
    "volumeClaimTemplates",
    "volumeClaimTemplatesPolicy",
}


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


def strict(schema):
    """An openAPIV3Schema as a JSON Schema that refuses unknown fields: the API server prunes or
    (with strict field validation) rejects them, and a typo must not pass silently."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if schema.get("nullable") and "type" in schema:
        out["type"] = [schema["type"], "null"]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schemas(path: pathlib.Path) -> dict:
    """{apiVersion: JSON Schema} for every served version of the CRD at `path`."""
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]
    return {
        f"{spec['group']}/{v['name']}": (spec["names"]["kind"], strict(v["schema"]["openAPIV3Schema"]))
        for v in spec["versions"]
        if v.get("served", True)
    }


def check_crd(doc: dict, schemas: dict, where: str, errors: list) -> None:
    found = schemas.get(doc.get("apiVersion"))
    if found is None or found[0] != doc.get("kind"):
        errors.append(f"{where}: the CRD serves no {doc.get('kind')} at {doc.get('apiVersion')} (it serves {sorted(schemas)})")
        return
    problems = sorted(jsonschema.Draft4Validator(found[1]).iter_errors(doc), key=lambda e: list(e.absolute_path))
    for e in problems:
        at = ".".join(str(p) for p in e.absolute_path) or "(top)"
        errors.append(f"{where}: against the CRD: {at}: {e.message}")
    if not problems:
        print(f"valid {doc['kind']}/{doc['metadata']['name']} against the CRD ({doc['apiVersion']})")


def main() -> int:
    args = sys.argv[1:]
    schemas = None
    if args[:1] == ["--crd"] and len(args) >= 2:
        schemas = crd_schemas(pathlib.Path(args[1]))
        args = args[2:]
    root = pathlib.Path(args[0] if args else "deploy")
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
            if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "SandboxTemplate":
                errors.append(f"{path}: not an {API_VERSION} SandboxTemplate")
                continue
            if schemas is not None:
                check_crd(doc, schemas, str(path), errors)
            extra = set(doc["spec"]) - SPEC_FIELDS
            if extra:
                errors.append(f"{path}: unknown SandboxTemplate spec fields {sorted(extra)}")
            template = doc["spec"].get("podTemplate")
            if not isinstance(template, dict) or "spec" not in template:
                errors.append(f"{path}: the SandboxTemplate has no spec.podTemplate.spec")
                continue
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
