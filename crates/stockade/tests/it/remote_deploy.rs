//! `deploy/` validates offline: the Kubernetes manifests against the Kubernetes OpenAPI schemas
//! bundled with the `kubernetes-validate` validator (strict), the agent-sandbox SandboxTemplate's
//! pod template as a Pod, with the same pod spec as the Deployment (`tests/deploy/validate.py`).
//! Broken copies are refused, so the check is not vacuous.

use std::path::Path;
use std::process::Command;

use crate::remote_support::{deploy_python, repo_root};

fn validate(dir: &Path) -> (bool, String) {
    let out = Command::new(deploy_python())
        .arg(repo_root().join("tests/deploy/validate.py"))
        .arg(dir)
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A copy of `deploy/` with `from` replaced by `to` in `file`.
fn broken(file: &str, from: &str, to: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["kubernetes", "agent-sandbox"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        for entry in std::fs::read_dir(repo_root().join("deploy").join(sub)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join(sub).join(entry.file_name())).unwrap();
        }
    }
    let path = dir.path().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    dir
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
