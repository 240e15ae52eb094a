//! `deploy/agent-sandbox/sandboxtemplate.yaml` against the agent-sandbox project's published
//! `SandboxTemplate` CRD: `tests/deploy/validate.py --crd` turns the CRD's `openAPIV3Schema` into
//! a strict JSON Schema (unknown fields are errors, as under the API server's strict field
//! validation) and checks the template with `jsonschema`. Copies the CRD refuses and the Pod
//! schema accepts (an enum value, a field the CRD's pod-template metadata lacks) must fail, so
//! the CRD check is not vacuous.
//!
//! Where the CRD comes from: see [`crd`] and `tests/deploy/README.md`. The CRD is not in this
//! repository (the sources it may be taken from here may not be committed) and no package
//! registry ships it, so these tests are `#[ignore]`d with that reason and run on demand with
//! `STOCKADE_AGENT_SANDBOX_CRD=FILE cargo test -p stockade --test it -- --ignored remote_crd`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use stockade_testkit::cannot_run;

use crate::remote_support::{broken_deploy, repo_root, validate_deploy};

/// The CRD's file name in the agent-sandbox repository (`k8s/crds/`).
const CRD_FILE: &str = "extensions.agents.x-k8s.io_sandboxtemplates.yaml";

/// The published CRD: `$STOCKADE_AGENT_SANDBOX_CRD`, else `tests/deploy/crds/`, else the shared
/// data directory beside the repository (`../shared/agent-sandbox/`).
fn crd() -> Option<PathBuf> {
    let root = repo_root();
    let candidates =
        std::env::var_os("STOCKADE_AGENT_SANDBOX_CRD").map(PathBuf::from).into_iter().chain([
            root.join("tests/deploy/crds").join(CRD_FILE),
            root.join("../shared/agent-sandbox").join(CRD_FILE),
        ]);
    for path in candidates {
        if path.is_file() {
            return Some(path);
        }
    }
    cannot_run(&format!(
        "the agent-sandbox CRD {CRD_FILE} is not here: set STOCKADE_AGENT_SANDBOX_CRD to it, or put it in tests/deploy/crds/ (see tests/deploy/README.md)"
    ));
    None
}

fn validate(crd: &Path, dir: &Path) -> (bool, String) {
    validate_deploy(&[OsStr::new("--crd"), crd.as_os_str()], dir)
}

/// A copy of `deploy/` whose SandboxTemplate has `from` replaced by `to`.
fn broken_template(from: &str, to: &str) -> tempfile::TempDir {
    broken_deploy("agent-sandbox/sandboxtemplate.yaml", from, to)
}

#[test]
#[ignore = "needs the agent-sandbox CRD, which this repository may not vendor (see tests/deploy/README.md): STOCKADE_AGENT_SANDBOX_CRD=FILE cargo test -p stockade --test it -- --ignored remote_crd"]
fn the_sandbox_template_validates_against_the_published_crd() {
    let Some(crd) = crd() else { return };
    let (ok, text) = validate(&crd, &repo_root().join("deploy"));
    assert!(ok, "{text}");
    assert!(
        text.contains(
            "valid SandboxTemplate/stockade against the CRD (extensions.agents.x-k8s.io/v1beta1)"
        ),
        "{text}"
    );
}

#[test]
#[ignore = "needs the agent-sandbox CRD, which this repository may not vendor (see tests/deploy/README.md): STOCKADE_AGENT_SANDBOX_CRD=FILE cargo test -p stockade --test it -- --ignored remote_crd"]
fn templates_the_crd_refuses_fail() {
    let Some(crd) = crd() else { return };
    for (from, to, reason) in [
        // Each of these passes the Pod schema and the spec-field list: only the CRD catches it.
        (
            "spec:\n  podTemplate:\n",
            "spec:\n  envVarsInjectionPolicy: Sometimes\n  podTemplate:\n",
            "spec.envVarsInjectionPolicy: 'Sometimes' is not one of",
        ),
        (
            "    metadata:\n      labels:\n",
            "    metadata:\n      name: pinned\n      labels:\n",
            "spec.podTemplate.metadata: Additional properties are not allowed ('name' was unexpected)",
        ),
        (
            "spec:\n  podTemplate:\n",
            "spec:\n  networkPolicyManagement: 7\n  podTemplate:\n",
            "spec.networkPolicyManagement: 7 is not of type 'string'",
        ),
        // And one the other checks catch too: a misspelt pod field.
        (
            "terminationGracePeriodSeconds",
            "terminationGraceSeconds",
            "('terminationGraceSeconds' was unexpected)",
        ),
    ] {
        let dir = broken_template(from, to);
        let (ok, text) = validate(&crd, dir.path());
        assert!(!ok, "{to:?} passed: {text}");
        assert!(text.contains("against the CRD") && text.contains(reason), "{to:?}: {text}");
    }
}
