//! How a kubelet and its container runtime turn an image and a pod's container into a process,
//! for the pod test (pod.rs). The image's config (`Entrypoint`, `Cmd`, `WorkingDir`, `User`,
//! `Env`) is what a builder makes of `deploy/Containerfile`, parsed in full: line continuations,
//! comments, stages (`FROM … AS name`, `FROM name`), `ARG`/`ENV` substitution, `ENTRYPOINT`/`CMD`
//! in exec and shell form (`SHELL`), a later `ENTRYPOINT` dropping a `CMD` inherited from the base
//! image, relative `WORKDIR`s. The container side is CRI's rule: `command` replaces `Entrypoint`,
//! `args` replaces `Cmd`, and a `command` without `args` drops `Cmd`; `$(VAR)` in both is expanded
//! from the container's environment; the environment is the runtime's default `PATH`, the image's
//! `Env`, then the container's `env`; `workingDir` over `WorkingDir` over `/`; `runAsUser` over
//! the image's `USER`.

use serde_json::Value;

/// The runtime's environment before the image's (containerd's default spec).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The parts of an OCI image config a container runtime uses to start the process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    pub user: String,
    pub env: Vec<(String, String)>,
    /// Destinations of `COPY --from=STAGE` (the build's products), absolute.
    pub copied: Vec<String>,
}

/// Configs of the base images the Containerfile may start its final stage from (as their
/// registries publish them).
fn base_image(name: &str) -> Option<ImageConfig> {
    match name {
        "docker.io/library/debian:bookworm-slim" | "debian:bookworm-slim" => Some(ImageConfig {
            cmd: vec!["bash".into()],
            env: vec![("PATH".into(), DEFAULT_PATH.into())],
            ..ImageConfig::default()
        }),
        "scratch" => Some(ImageConfig::default()),
        _ => None,
    }
}

/// Instructions of a Containerfile: (keyword upper-cased, the rest), continuations joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') || (trimmed.is_empty() && !pending.is_empty()) {
            continue; // comments (even inside a continuation) and blank continuation lines
        }
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        let full = std::mem::take(&mut pending);
        let full = full.trim();
        if full.is_empty() {
            continue;
        }
        let (word, rest) = full.split_once(char::is_whitespace).unwrap_or((full, ""));
        out.push((word.to_ascii_uppercase(), rest.trim().to_owned()));
    }
    out
}

/// `$VAR` and `${VAR}` from `vars`; other forms are refused.
fn substitute(s: &str, vars: &[(String, String)]) -> Result<String, String> {
    let lookup = |name: &str| {
        vars.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default()
    };
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'$') => out.push(chars.next().unwrap_or('$')),
            '$' if chars.peek() == Some(&'{') => {
                chars.next();
                let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!("unsupported substitution ${{{name}}} in {s:?}"));
                }
                out.push_str(&lookup(&name));
            }
            '$' if chars.peek().is_some_and(|c| c.is_ascii_alphabetic() || *c == '_') => {
                let mut name = String::new();
                while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_') {
                    name.push(c);
                }
                out.push_str(&lookup(&name));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Words of `KEY=VALUE …` (double or single quotes, backslash escapes), as a shell would split them.
fn words(s: &str) -> Result<Vec<String>, String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, '"' | '\'') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => {
                cur.push(chars.next().ok_or_else(|| format!("a trailing backslash in {s:?}"))?);
                any = true;
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("an unclosed quote in {s:?}"));
    }
    if any {
        out.push(cur);
    }
    Ok(out)
}

/// `ENTRYPOINT`/`CMD`/`SHELL`: exec form (a JSON array of strings), else shell form.
fn exec_or_shell(rest: &str, shell: &[String]) -> Vec<String> {
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(rest)
        && items.iter().all(Value::is_string)
    {
        return items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
    }
    let mut argv = shell.to_vec();
    argv.push(rest.to_owned());
    argv
}

/// `path` joined to `base` the way `WORKDIR` and `COPY` resolve a relative path.
fn resolve(base: &str, path: &str) -> String {
    if path.starts_with('/') {
        return path.to_owned();
    }
    let mut out = String::from(if base.is_empty() { "/" } else { base });
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            let cut = out.trim_end_matches('/').rfind('/').unwrap_or(0);
            out.truncate(cut.max(1));
        } else {
            if !out.ends_with('/') {
                out.push('/');
            }
            out.push_str(part);
        }
    }
    out
}

/// One build stage's config as it is being built.
struct Stage {
    name: Option<String>,
    config: Result<ImageConfig, String>,
    cmd_set: bool,
    shell: Vec<String>,
}

/// The image config a builder makes of `containerfile` (its last stage).
pub fn image_config(containerfile: &str) -> Result<ImageConfig, String> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut global_args: Vec<(String, String)> = Vec::new();
    let mut args: Vec<(String, String)> = Vec::new();
    for (word, rest) in instructions(containerfile) {
        if word == "FROM" {
            let parts = words(&rest)?;
            let parts: Vec<&String> = parts.iter().filter(|p| !p.starts_with("--")).collect();
            let from = substitute(parts.first().ok_or("a FROM without an image")?, &global_args)?;
            let name = match parts.as_slice() {
                [_, kw, name] if kw.eq_ignore_ascii_case("as") => Some(name.to_string()),
                [_] => None,
                _ => return Err(format!("cannot read FROM {rest}")),
            };
            let config = match stages.iter().rev().find(|s| s.name.as_deref() == Some(&*from)) {
                Some(s) => s.config.clone(),
                None => base_image(&from).ok_or(format!("the base image {from} is not known here")),
            };
            let shell = vec!["/bin/sh".to_owned(), "-c".to_owned()];
            stages.push(Stage { name, config, cmd_set: false, shell });
            args.clear();
            continue;
        }
        let Some(stage) = stages.last_mut() else {
            if word == "ARG" {
                global_args.extend(words(&rest)?.iter().map(|w| split_kv(w)));
            }
            continue;
        };
        let Ok(config) = stage.config.as_mut() else { continue };
        let vars: Vec<(String, String)> =
            args.iter().chain(&config.env).map(|(k, v)| (k.clone(), v.clone())).collect();
        match word.as_str() {
            "ARG" => args.extend(words(&rest)?.iter().map(|w| split_kv(w))),
            "ENV" => {
                let ws = words(&rest)?;
                let pairs = if ws.first().is_some_and(|w| !w.contains('=')) {
                    let (k, v) = rest.split_once(char::is_whitespace).unwrap_or((&rest, ""));
                    vec![(k.to_owned(), v.trim().to_owned())]
                } else {
                    ws.iter().map(|w| split_kv(w)).collect()
                };
                for (k, v) in pairs {
                    let v = substitute(&v, &vars)?;
                    config.env.retain(|(key, _)| *key != k);
                    config.env.push((k, v));
                }
            }
            "WORKDIR" => {
                config.working_dir = resolve(&config.working_dir, &substitute(&rest, &vars)?);
            }
            "USER" => config.user = substitute(&rest, &vars)?,
            "SHELL" => stage.shell = exec_or_shell(&rest, &[]),
            "CMD" => {
                config.cmd = exec_or_shell(&rest, &stage.shell);
                stage.cmd_set = true;
            }
            "ENTRYPOINT" => {
                config.entrypoint = exec_or_shell(&rest, &stage.shell);
                if !stage.cmd_set {
                    config.cmd.clear(); // an ENTRYPOINT resets the base image's CMD
                }
            }
            "COPY" | "ADD" => {
                let ws = words(&substitute(&rest, &vars)?)?;
                let from = ws.iter().any(|w| w.starts_with("--from="));
                let plain: Vec<&String> = ws.iter().filter(|w| !w.starts_with("--")).collect();
                if let (true, [_, .., dest]) = (from, plain.as_slice()) {
                    config.copied.push(resolve(&config.working_dir, dest));
                }
            }
            _ => {}
        }
    }
    stages.pop().ok_or("no FROM in the Containerfile")?.config
}

fn split_kv(w: &str) -> (String, String) {
    let (k, v) = w.split_once('=').unwrap_or((w, ""));
    (k.to_owned(), v.to_owned())
}

/// What a pod's container sets (`tests/deploy/podspec.py`'s answer).
#[derive(Clone, Debug, Default)]
pub struct Container {
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub env: Vec<(String, String)>,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
}

impl Container {
    /// From podspec.py's JSON.
    pub fn from_spec(spec: &Value) -> Container {
        let list = |v: &Value| {
            v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
        };
        let id = |v: &Value| v.as_u64().map(|n| u32::try_from(n).unwrap());
        Container {
            command: list(&spec["command"]),
            args: list(&spec["args"]),
            working_dir: spec["working_dir"].as_str().map(str::to_owned),
            env: spec["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e[0].as_str().unwrap().to_owned(), e[1].as_str().unwrap().to_owned()))
                .collect(),
            run_as_user: id(&spec["run_as_user"]),
            run_as_group: id(&spec["run_as_group"]),
        }
    }
}

/// The process a container runtime starts.
#[derive(Debug, PartialEq)]
pub struct Process {
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// `runAsUser`, else the image's `USER` (a name is looked up by the caller).
    pub user: String,
    pub group: Option<String>,
}

/// Kubernetes' `$(VAR)` expansion (`$$` is a literal `$`; an unknown name stays as written).
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')'))
            && let Some((_, v)) = env.iter().rev().find(|(k, _)| k == name)
        {
            out.push_str(v);
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// CRI's rule (containerd's `WithProcessArgs`, the kubelet's expansion) for one container.
pub fn process(image: &ImageConfig, c: &Container) -> Result<Process, String> {
    // The kubelet expands the container's own variables, in order, from those before them; the
    // runtime puts them over its default and the image's.
    let mut own: Vec<(String, String)> = Vec::new();
    for (k, v) in &c.env {
        let v = expand(v, &own);
        own.push((k.clone(), v));
    }
    let mut env: Vec<(String, String)> = vec![("PATH".into(), DEFAULT_PATH.into())];
    for (k, v) in image.env.iter().chain(&own) {
        env.retain(|(key, _)| key != k);
        env.push((k.clone(), v.clone()));
    }
    let command = c.command.clone().filter(|c| !c.is_empty());
    let args = c.args.clone().filter(|a| !a.is_empty());
    let argv: Vec<String> = match (command, args) {
        (Some(command), args) => command.into_iter().chain(args.unwrap_or_default()).collect(),
        (None, Some(args)) => image.entrypoint.iter().cloned().chain(args).collect(),
        (None, None) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
    };
    let argv: Vec<String> = argv.iter().map(|a| expand(a, &own)).collect();
    if argv.is_empty() {
        return Err("no command specified".into());
    }
    let cwd = c.working_dir.clone().unwrap_or_else(|| image.working_dir.clone());
    let cwd = if cwd.is_empty() { "/".to_owned() } else { cwd };
    let (image_user, image_group) = match image.user.split_once(':') {
        Some((u, g)) => (u.to_owned(), Some(g.to_owned())),
        None => (image.user.clone(), None),
    };
    let user = c.run_as_user.map_or(image_user, |u| u.to_string());
    let group = c.run_as_group.map(|g| g.to_string()).or(image_group);
    Ok(Process { argv, cwd, env, user, group })
}

/// The Containerfile's config before the fix: the whole daemon command as `ENTRYPOINT`, which a
/// manifest's `args` came after.
#[cfg(test)]
const OLD_CONTAINERFILE: &str = r#"
FROM docker.io/library/debian:bookworm-slim
USER 10001:10001
ENV STOCKADE_HOME=/var/lib/stockade
ENTRYPOINT ["/usr/local/bin/stockade", "daemon", "run", "--ws", "0.0.0.0:7433", \
    "--token-file", "/etc/stockade/token/token"]
"#;

#[cfg(test)]
fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[test]
fn a_containerfile_is_read_in_full() {
    let text = r#"
ARG BASE=docker.io/library/debian:bookworm-slim
FROM docker.io/library/rust:1.95-bookworm AS build
ENTRYPOINT ["ignored"]
FROM ${BASE} AS base
CMD ["early"]
# a comment
ENV A=1 B="two words" \
    # a comment inside a continuation
    C=$A/x
ENV D=${A}/$B
ENV LEGACY value with spaces
WORKDIR /work
WORKDIR sub/../sub/
COPY --from=build /src/bin ./bin
FROM base
USER agent:agent
ENTRYPOINT exec run "$A"
"#;
    let c = image_config(text).unwrap();
    assert_eq!(c.entrypoint, strings(&["/bin/sh", "-c", "exec run \"$A\""]));
    assert_eq!(c.cmd, Vec::<String>::new(), "an ENTRYPOINT drops the CMD its stage inherited");
    assert_eq!(c.working_dir, "/work/sub");
    assert_eq!(c.user, "agent:agent");
    assert_eq!(c.copied, strings(&["/work/sub/bin"]));
    let env: Vec<(&str, &str)> = c.env.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(
        env,
        [
            ("PATH", DEFAULT_PATH),
            ("A", "1"),
            ("B", "two words"),
            ("C", "/x"),
            ("D", "1/two words"),
            ("LEGACY", "value with spaces")
        ]
    );
}

#[test]
fn an_entrypoint_drops_the_base_images_cmd_and_a_later_cmd_stays() {
    let c = image_config("FROM debian:bookworm-slim\nENTRYPOINT [\"/e\"]\n").unwrap();
    assert_eq!((c.entrypoint, c.cmd), (strings(&["/e"]), vec![]));
    let c = image_config("FROM debian:bookworm-slim\nENTRYPOINT [\"/e\"]\nCMD a b\n").unwrap();
    assert_eq!(c.cmd, strings(&["/bin/sh", "-c", "a b"]));
    let c = image_config("FROM debian:bookworm-slim\nSHELL [\"/bin/bash\", \"-ec\"]\nCMD x\n");
    assert_eq!(c.unwrap().cmd, strings(&["/bin/bash", "-ec", "x"]));
    assert!(image_config("FROM example.org/unknown\n").is_err(), "an unknown base is said");
}

#[test]
fn the_kubelet_rule_for_command_and_args() {
    let image = ImageConfig {
        entrypoint: strings(&["/e", "x"]),
        cmd: strings(&["c1", "c2"]),
        env: vec![("P".into(), "image".into())],
        user: "10001:10002".into(),
        ..ImageConfig::default()
    };
    let run = |command: Option<&[&str]>, args: Option<&[&str]>| {
        let c = Container {
            command: command.map(strings),
            args: args.map(strings),
            env: vec![("P".into(), "pod".into()), ("Q".into(), "q-$(P)".into())],
            ..Container::default()
        };
        process(&image, &c).unwrap()
    };
    assert_eq!(run(None, None).argv, strings(&["/e", "x", "c1", "c2"]));
    assert_eq!(run(None, Some(&["a"])).argv, strings(&["/e", "x", "a"]));
    assert_eq!(run(Some(&["/k"]), None).argv, strings(&["/k"]), "command without args drops CMD");
    assert_eq!(run(Some(&["/k"]), Some(&["a"])).argv, strings(&["/k", "a"]));
    assert_eq!(run(Some(&[]), Some(&[])).argv, strings(&["/e", "x", "c1", "c2"]), "empty is unset");
    assert_eq!(
        run(None, Some(&["$(Q)", "$$(Q)", "$(NONE)"])).argv[2..],
        strings(&["q-pod", "$(Q)", "$(NONE)"])
    );
    let p = run(None, None);
    assert_eq!(
        (p.cwd.as_str(), p.user.as_str(), p.group.as_deref()),
        ("/", "10001", Some("10002"))
    );
    let env: Vec<(&str, &str)> = p.env.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(env, [("PATH", DEFAULT_PATH), ("P", "pod"), ("Q", "q-pod")]);
    let mut image = image.clone();
    image.env = vec![("P".into(), "image".into())];
    let c = Container { args: Some(strings(&["$(P)"])), ..Container::default() };
    assert_eq!(process(&image, &c).unwrap().argv[2], "$(P)", "the image's Env is not expanded");
}

#[test]
fn the_old_one_word_derivation_hid_the_crash_argv() {
    let image = image_config(OLD_CONTAINERFILE).unwrap();
    let args = strings(&["daemon", "run", "--ws", "0.0.0.0:7433"]);
    let c = Container { args: Some(args.clone()), ..Container::default() };
    let kubelet = process(&image, &c).unwrap().argv;
    // What the pod test used to run: the ENTRYPOINT's first word, then the manifest's args.
    let one_word: Vec<String> = image.entrypoint[..1].iter().cloned().chain(args).collect();
    assert_ne!(kubelet, one_word);
    assert_eq!(kubelet.iter().filter(|w| *w == "daemon").count(), 2, "{kubelet:?}");
    // The binary refuses the kubelet's argv, as the shipped pod did.
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(stockade_testkit::stockade_bin())
        .args(&kubelet[1..])
        .env("STOCKADE_HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
