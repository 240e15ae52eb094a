//! Command-line mistakes in one sentence: clap's errors (a bad value, an unknown flag, a
//! missing argument, two flags that exclude each other) reworded to name the flag and the value
//! the user typed and to say what to do, instead of clap's multi-line report with parser text
//! such as "invalid digit found in string". `--help` and `--version` pass through unchanged.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The sentence `main` prints (after `stockade: `) for a parse error; `argv` is the command line
/// as given, for the errors where clap does not say which flag it was parsing.
pub fn sentence(e: &clap::Error, argv: &[OsString]) -> String {
    let rendered = e.render().to_string();
    let command = command_path(&rendered);
    let help = format!("`{command} --help` lists what it takes");
    let arg = context(e, ContextKind::InvalidArg).map(|a| flag_only(&a));
    let value = context(e, ContextKind::InvalidValue);
    match e.kind() {
        ErrorKind::ValueValidation => {
            let arg = arg.unwrap_or_else(|| "a value".into());
            let value = value.unwrap_or_default();
            let reason = match std::error::Error::source(e) {
                Some(s) => match s.downcast_ref::<std::num::ParseIntError>() {
                    Some(p) => whole_number(p),
                    None => out_of_range(&s.to_string(), &value),
                },
                None => "is not valid".to_owned(),
            };
            format!("{arg} {value} {reason}")
        }
        ErrorKind::InvalidValue => {
            let arg = arg.unwrap_or_else(|| "a value".into());
            let value = value.unwrap_or_default();
            let valid = context(e, ContextKind::ValidValue);
            match valid {
                Some(valid) => format!("{arg} {value:?} is not one of {valid}; pick one of them"),
                None => format!("{arg} needs a value; {help}"),
            }
        }
        ErrorKind::UnknownArgument if arg.as_deref().is_some_and(is_negative_number) => {
            // `--max-lines -3`: clap took the value for a short option.
            let arg = arg.unwrap_or_default();
            match flag_before(argv, &arg) {
                Some((flag, value)) => format!("{flag} {value} is negative; pass 0 or more"),
                None => format!("{arg} is negative; pass 0 or more"),
            }
        }
        ErrorKind::InvalidUtf8 => match first_non_utf8(argv) {
            Some((Some(flag), value)) => {
                format!("{flag} {value} is not UTF-8 text; pass it as UTF-8")
            }
            Some((None, value)) => format!(
                "the argument {value} is not UTF-8 text; commands and names must be UTF-8 (only paths may be other bytes)"
            ),
            None => format!("an argument is not UTF-8 text; {help}"),
        },
        ErrorKind::UnknownArgument => {
            let arg = arg.unwrap_or_default();
            match context(e, ContextKind::SuggestedArg) {
                Some(s) => format!("`{command}` has no option {arg} (did you mean {s}?); {help}"),
                None => format!("`{command}` has no option {arg}; {help}"),
            }
        }
        ErrorKind::InvalidSubcommand => {
            let sub = context(e, ContextKind::InvalidSubcommand).unwrap_or_default();
            match context(e, ContextKind::SuggestedSubcommand) {
                Some(s) => {
                    format!("`{command}` has no command {sub:?} (did you mean {s}?); {help}")
                }
                None => format!("`{command}` has no command {sub:?}; {help}"),
            }
        }
        ErrorKind::MissingRequiredArgument => {
            let missing = arg.unwrap_or_else(|| "an argument".into());
            format!("`{command}` needs {missing}; {help}")
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            format!("`{command}` needs a command; {help}")
        }
        ErrorKind::ArgumentConflict => {
            let arg = arg.unwrap_or_default();
            match context(e, ContextKind::PriorArg).map(|p| flag_only(&p)) {
                Some(prior) if prior != arg => {
                    format!("{arg} cannot be used with {prior}; drop one of them")
                }
                _ => format!("{arg} was given twice; give it once"),
            }
        }
        _ => {
            // Clap's first line, without its "error: " and its usage block.
            let first = rendered.lines().next().unwrap_or("").trim_start_matches("error: ");
            format!("{first}; {help}")
        }
    }
}

/// Why a number did not parse, and what to pass.
fn whole_number(e: &std::num::ParseIntError) -> String {
    use std::num::IntErrorKind;
    match e.kind() {
        IntErrorKind::PosOverflow => "is too large; pass a smaller number".to_owned(),
        IntErrorKind::Empty => "is empty; pass a whole number".to_owned(),
        _ => "is not a whole number; pass digits only, e.g. 100".to_owned(),
    }
}

/// Clap's range message (`100000 is not in 1..=65535`) as `is out of range: pass 1 to 65535`;
/// any other message as it is.
fn out_of_range(message: &str, value: &str) -> String {
    let range = message.strip_prefix(value).and_then(|m| m.trim().strip_prefix("is not in "));
    match range.and_then(|r| r.split_once("..=")) {
        Some((low, high)) => format!("is out of range: pass {low} to {high}"),
        None => message.to_owned(),
    }
}

/// `-3`, `-1s`, `-0.5`: a value that starts like a negative number.
fn is_negative_number(arg: &str) -> bool {
    arg.strip_prefix('-').is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
}

/// The flag given just before the argument clap reported as `arg`, and the whole argument
/// (`--timeout -1s` → (`--timeout`, `-1s`)).
fn flag_before(argv: &[OsString], arg: &str) -> Option<(String, String)> {
    let at = argv.iter().position(|a| a.to_str().is_some_and(|a| a.starts_with(arg)))?;
    let flag = argv.get(at.checked_sub(1)?)?.to_str()?;
    flag.starts_with("--").then(|| (flag.to_owned(), argv[at].to_string_lossy().into_owned()))
}

/// The first argument that is not UTF-8 (its bytes escaped, `\xff`), with the flag before it.
fn first_non_utf8(argv: &[OsString]) -> Option<(Option<String>, String)> {
    use std::os::unix::ffi::OsStrExt as _;
    let at = argv.iter().skip(1).position(|a| a.to_str().is_none())? + 1;
    let value = argv[at].as_bytes().escape_ascii().to_string();
    let flag = argv[at - 1].to_str().filter(|f| f.starts_with("--") && at > 1);
    Some((flag.map(str::to_owned), value))
}

/// A context value as text (lists joined with commas).
fn context(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) if !v.is_empty() => Some(v.join(", ")),
        ContextValue::StyledStr(s) => Some(s.to_string()),
        ContextValue::StyledStrs(v) if !v.is_empty() => {
            Some(v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
        }
        ContextValue::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `--max-bytes <SIZE>` → `--max-bytes` (a positional `<ID>...` stays as it is).
fn flag_only(arg: &str) -> String {
    if arg.starts_with('-') {
        arg.split([' ', '=']).next().unwrap_or(arg).to_owned()
    } else {
        arg.to_owned()
    }
}

/// The subcommand the error is about, from clap's usage line (`Usage: stockade kill …` →
/// `stockade kill`); `stockade` when there is none.
fn command_path(rendered: &str) -> String {
    let Some(usage) = rendered.lines().find_map(|l| l.trim_start().strip_prefix("Usage: ")) else {
        return "stockade".into();
    };
    let words: Vec<&str> = usage
        .split_whitespace()
        .take_while(|w| {
            !w.starts_with(['-', '<', '[']) && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .collect();
    if words.is_empty() { "stockade".into() } else { words.join(" ") }
}
