//! envd's `/init` and the environment a command starts from. envd gives a command its own
//! `PATH`, the user's `HOME`, `USER` and `LOGNAME`, the variables the platform set with `/init`
//! (`envVars`, kept from one `/init` to the next), then the request's `envs` — never the rest of
//! its own environment. So does this door: the daemon's other variables (its `STOCKADE_HOME`, a
//! token's path, whatever its service manager set) stay out of the commands.

use std::sync::{Mutex, PoisonError};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};

use crate::connect::read_body;
use crate::http_error;

/// `PATH` when the daemon has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Largest `/init` body read.
const MAX_INIT: usize = 1024 * 1024;

/// The variables `/init` set.
#[derive(Debug, Default)]
pub(crate) struct InitEnv(Mutex<Vec<(String, String)>>);

impl InitEnv {
    /// The environment a command starts from (its request's `envs` go on top).
    pub(crate) fn base(&self) -> Vec<(String, String)> {
        let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned());
        let mut env = vec![("PATH".to_owned(), path)];
        let me = crate::accounts::by_uid(rustix::process::geteuid().as_raw());
        if let Some(me) = me {
            env.push(("HOME".to_owned(), me.home.display().to_string()));
            env.push(("USER".to_owned(), me.name.clone()));
            env.push(("LOGNAME".to_owned(), me.name));
        } else if let Ok(home) = std::env::var("HOME") {
            env.push(("HOME".to_owned(), home));
        }
        for (k, v) in self.0.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            env.retain(|(key, _)| key != k);
            env.push((k.clone(), v.clone()));
        }
        env
    }

    /// `POST /init`: its `envVars` are kept for every command started from then on.
    pub(crate) async fn init(&self, body: Body) -> Response {
        let bytes = match read_body(body, MAX_INIT).await {
            Ok(b) => b,
            Err(e) => return http_error(StatusCode::PAYLOAD_TOO_LARGE, e.message),
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return StatusCode::NO_CONTENT.into_response();
        }
        let json: serde_json::Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                return http_error(
                    StatusCode::BAD_REQUEST,
                    format!("/init's body is not JSON: {e}"),
                );
            }
        };
        let Some(vars) = json.get("envVars").filter(|v| !v.is_null()) else {
            return StatusCode::NO_CONTENT.into_response();
        };
        let Some(vars) = vars.as_object() else {
            return http_error(StatusCode::BAD_REQUEST, "/init's envVars is not an object");
        };
        let mut new = Vec::new();
        for (k, v) in vars {
            let Some(v) = v.as_str() else {
                return http_error(StatusCode::BAD_REQUEST, format!("envVars.{k} is not a string"));
            };
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                let why = format!("envVars.{k:?} cannot be an environment variable");
                return http_error(StatusCode::BAD_REQUEST, why);
            }
            new.push((k.clone(), v.to_owned()));
        }
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (k, v) in new {
            kept.retain(|(key, _)| *key != k);
            kept.push((k, v));
        }
        StatusCode::NO_CONTENT.into_response()
    }
}
