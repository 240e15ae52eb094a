//! The TypeScript client (npm/stockade/src, compiled with the pinned compiler that
//! tests/packaging/install-npm-deps.sh installs) against the real binary: `run` uses the
//! caller's directory and environment, an aborted `AbortSignal` terminates the command, the
//! client goes on after its daemon was stopped, wrong arguments get a sentence naming them, and
//! a program that never calls `close()` ends by itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use stockade_testkit::child::run_bounded;
use stockade_testkit::{Home, cannot_run, stockade_bin, text};

/// Bound on the program (it must end by itself: no `close()`).
const PROGRAM: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The client compiled into `out` (`None`, after `cannot_run`, without the pinned compiler).
fn compiled(out: &Path) -> Option<PathBuf> {
    let modules = repo().join("target/npm-build/node_modules");
    let tsc = modules.join("typescript/bin/tsc");
    if !tsc.exists() {
        cannot_run("no TypeScript compiler: run tests/packaging/install-npm-deps.sh");
        return None;
    }
    let package = out.join("stockade");
    let copied = Command::new("cp")
        .args(["-r", repo().join("npm/stockade").to_str().unwrap(), out.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copied.success());
    std::os::unix::fs::symlink(&modules, package.join("node_modules")).unwrap();
    let built = Command::new("node")
        .arg(&tsc)
        .args(["-p", "tsconfig.json"])
        .current_dir(&package)
        .output()
        .unwrap();
    assert!(built.status.success(), "tsc: {}{}", text(&built.stdout), text(&built.stderr));
    Some(package.join("dist/index.js"))
}

const PROGRAM_TEXT: &str = r#"
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
const [index, home, binary] = process.argv.slice(1);
const { Client } = await import(index);
mkdirSync("sub", { recursive: true });
process.env.PROJECT_VAR = "from-the-caller";
const c = new Client({ home, binary });
const here = (await c.run('pwd; echo "$PROJECT_VAR $EXTRA"', { env: { EXTRA: "extra" } })).output;
const sub = (await c.run("pwd", { cwd: "sub" })).output;
const errors = [];
for (const bad of [() => c.run(42), () => c.run("true", { env: { A: 1 } }),
                   () => c.run("true", { timeoutMs: "5" }), () => c.run("true", { cwd: 3 })]) {
  try { await bad(); } catch (e) { errors.push(e.message); }
}
const ac = new AbortController();
const cmd = "echo aborted-run; sleep 100";
const started = setInterval(async () => {
  if ((await c.sessions()).some((s) => s.command === cmd)) { clearInterval(started); ac.abort(new Error("stop")); }
}, 50);
let abortedWith = null;
try { await c.run(cmd, { signal: ac.signal }); } catch (e) { abortedWith = e.message; }
const aborted = (await c.sessions()).find((s) => s.command === cmd);
execFileSync(binary, ["--home", home, "daemon", "stop"]);
const after = (await c.run("echo after")).output;
console.log(JSON.stringify({ here, sub, errors, abortedWith, aborted, after }));
"#;

#[test]
fn typescript_run_uses_the_callers_world_ends_on_abort_and_needs_no_close() {
    let home = Home::new();
    let build = tempfile::tempdir().unwrap();
    let Some(index) = compiled(build.path()) else { return };
    let started = home.cmd(&["daemon", "start"]).current_dir("/").output().unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));
    let work = tempfile::tempdir().unwrap();
    let work_path = work.path().canonicalize().unwrap();
    let mut node = Command::new("node");
    node.args(["--input-type=module", "-e", PROGRAM_TEXT])
        .args([index.to_str().unwrap(), home.path_str(), stockade_bin().to_str().unwrap()])
        .current_dir(&work_path)
        .env_remove("STOCKADE_HOME")
        .stdin(Stdio::null());
    // No close() in the program: it must end by itself, within the bound.
    let out = run_bounded(&mut node, PROGRAM);
    assert!(out.status.success(), "{}", out.stderr);
    let got: Value = serde_json::from_str(&out.stdout).unwrap();
    let dir = work_path.display();
    assert_eq!(got["here"], format!("{dir}\nfrom-the-caller extra\n"), "{got}");
    assert_eq!(got["sub"], format!("{dir}/sub\n"), "{got}");
    let errors: Vec<&str> =
        got["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(errors.len(), 4, "{got}");
    let arguments = ["command", "options.env.A", "options.timeoutMs", "options.cwd"];
    for (error, argument) in errors.iter().zip(arguments) {
        assert!(error.starts_with(&format!("run: {argument} must")), "{error}");
    }
    assert_eq!(got["abortedWith"], "stop", "{got}");
    assert_eq!(got["aborted"]["state"], "killed", "{got}");
    assert_eq!(got["after"], "after\n", "{got}");
}

/// The ```ts blocks of `doc`.
fn ts_blocks(doc: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    text.split("```ts\n").skip(1).map(|b| b.split("```").next().unwrap().to_owned()).collect()
}

#[test]
fn the_typescript_docs_examples_pass_tsc_strict() {
    let build = tempfile::tempdir().unwrap();
    let Some(index) = compiled(build.path()) else { return };
    let package = index.parent().unwrap().parent().unwrap();
    // A project that installed the package: `import … from "@stockade-sh/cli"` resolves to it.
    let project = build.path().join("project");
    let scope = project.join("node_modules/@stockade-sh");
    std::fs::create_dir_all(&scope).unwrap();
    std::os::unix::fs::symlink(package, scope.join("cli")).unwrap();
    let types = repo().join("target/npm-build/node_modules/@types");
    std::os::unix::fs::symlink(types, project.join("node_modules/@types")).unwrap();
    std::fs::write(project.join("package.json"), r#"{"type":"module"}"#).unwrap();
    let blocks = ts_blocks("docs/clients-typescript.md");
    assert!(!blocks.is_empty(), "no ```ts block in docs/clients-typescript.md");
    let mut files = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let name = format!("example{i}.ts");
        std::fs::write(project.join(&name), format!("{block}\nexport {{}};\n")).unwrap();
        files.push(name);
    }
    let tsc = repo().join("target/npm-build/node_modules/typescript/bin/tsc");
    let strict = [
        "--strict",
        "--noEmit",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--target",
        "es2022",
        "--lib",
        "es2022,esnext.disposable",
        "--types",
        "node",
    ];
    let out = Command::new("node")
        .arg(tsc)
        .args(strict)
        .args(&files)
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "tsc --strict: {}{}", text(&out.stdout), text(&out.stderr));
}
