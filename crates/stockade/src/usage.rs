//! Command-line mistakes in one sentence: clap's errors (a bad value, an unknown flag, a
//! missing argument, two flags that exclude each other) reworded to name the flag and the value
//! the user typed and to say what to do, instead of clap's multi-line report with parser text
//! such as "invalid digit found in string". `--help` and `--version` pass through unchanged.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The sentence `main` prints (after `stockade: `) for a parse error.
pub fn sentence(e: &clap::Error) -> String {
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
                Some(s) if s.is::<std::num::ParseIntError>() => "is not a whole number".to_owned(),
                Some(s) => s.to_string(),
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
