//! `deploy/` validates offline: the Kubernetes manifests against the Kubernetes OpenAPI schemas
//! bundled with the `kubernetes-validate` validator (strict), the agent-sandbox SandboxTemplate's
//! pod template as a Pod, with the same pod spec as the Deployment (`tests/deploy/validate.py`).
//! Broken copies are refused, so the check is not vacuous.

use std::path::Path;

use crate::remote_support::{broken_deploy as broken, repo_root, validate_deploy};

fn validate(dir: &Path) -> (bool, String) {
    validate_deploy(&[], dir)
}

#[test]
fn the_manifests_validate_offline() {
    let (ok, text) = validate(&repo_root().join("deploy"));
    assert!(ok, "{text}");
    for resource in
        ["Deployment/stockade", "Service/stockade", "Secret/stockade-token", "Pod/stockade"]
    {
        assert!(text.contains(&format!("valid {resource}")), "{resource} not validated: {text}");
    }
}

#[test]
fn broken_manifests_are_refused() {
    for (file, from, to) in [
        ("kubernetes/deployment.yaml", "containerPort: 7433", "containerPort: seventy"),
        ("kubernetes/service.yaml", "targetPort: door", "targetPorts: door"),
        (
            "agent-sandbox/sandboxtemplate.yaml",
            "terminationGracePeriodSeconds",
            "terminationGraceSeconds",
        ),
        ("agent-sandbox/sandboxtemplate.yaml", "kind: SandboxTemplate", "kind: SandboxTemplates"),
        ("kubernetes/deployment.yaml", "path: /readyz", "path: /healthz"),
        ("kubernetes/deployment.yaml", "runAsNonRoot: true", "runAsNonRoot: false"),
    ] {
        let dir = broken(file, from, to);
        let (ok, text) = validate(dir.path());
        assert!(!ok, "{file} with {to:?} passed: {text}");
    }
}
