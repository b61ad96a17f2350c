//! Who may use `serve` (issue 16): the checks every request passes before a handler.
//!
//! - **Host** (every path, the page too): the listen address or a loopback name with the
//!   listening port. A web page that rebinds its own DNS name to 127.0.0.1 sends its own
//!   name as `Host`, so it is refused (421) before it reads or changes anything.
//! - **Origin** (POST, PUT, PATCH, DELETE): when present, `http://` + an accepted Host.
//!   Browsers send `Origin` on every cross-origin state-changing request, and on the
//!   wizard's own same-origin POST and DELETE, so a foreign page is refused (403) while the
//!   wizard and non-browser clients (which send none) pass.
//! - **Sec-Fetch-Site** (`/v1`): `cross-site` is refused (403). Browsers send it on every
//!   request another site makes (even a GET through `<img>`); the wizard's own requests
//!   are `same-origin`, and other clients send none.
//! - **Bearer token** (`/v1`, when one is configured): `Authorization: Bearer TOKEN`,
//!   compared in constant time, else 401. The page and its assets hold no secret and are
//!   served without it; the wizard asks for the token when the API answers 401.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The secret every `/v1` request must carry. Its `Debug` never shows it.
#[derive(Clone)]
pub struct AuthToken(String);

impl AuthToken {
    /// The token held by the file at `path` (`--auth-token-file`), surrounding whitespace
    /// removed. Errors (naming the flag and the path, never the content) when the file
    /// cannot be read or holds no token.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<AuthToken> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("--auth-token-file {}: cannot read it: {e}", path.display())
        })?;
        let token = text.trim();
        anyhow::ensure!(
            !token.is_empty(),
            "--auth-token-file {}: the file holds no token (it is empty)",
            path.display()
        );
        Ok(AuthToken(token.to_string()))
    }

    fn matches(&self, given: &str) -> bool {
        self.0.as_bytes().ct_eq(given.as_bytes()).into()
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

/// The accepted `Host` values and the token, fixed when the listener is bound.
#[derive(Debug, Clone)]
pub struct Access {
    /// Lowercase `host:port` values a request may name.
    hosts: Vec<String>,
    token: Option<AuthToken>,
}

impl Access {
    /// For a listener bound at `bound` from `--listen given`: accepts the bound address,
    /// the host as given with the bound port, and `localhost`, `127.0.0.1` and `[::1]`
    /// with the bound port.
    pub fn new(given: &str, bound: SocketAddr, token: Option<AuthToken>) -> Access {
        let port = bound.port();
        let mut hosts = vec![
            bound.to_string(),
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ];
        if let Some((host, _)) = given.rsplit_once(':') {
            if !host.is_empty() {
                hosts.push(format!("{host}:{port}"));
            }
        }
        let mut hosts: Vec<String> = hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect();
        hosts.sort();
        hosts.dedup();
        Access { hosts, token }
    }

    /// Whether a token is required.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The first reason to refuse a request, if any.
    fn refuse(&self, method: &Method, path: &str, headers: &HeaderMap) -> Option<ApiError> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let Some(host) = self.accepted(host) else {
            return Some(self.wrong_host(host));
        };
        let changes = matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        if let Some(origin) = headers.get(header::ORIGIN) {
            let own = origin.to_str().is_ok_and(|o| self.is_own_origin(o));
            if changes && !own {
                let shown = origin.to_str().unwrap_or("<not text>");
                return Some(refused(
                    StatusCode::FORBIDDEN,
                    format!("refused: a {method} from the web page at origin '{shown}', not from this server's own page (http://{host}); another site's page may not change saved profiles or tables"),
                ));
            }
        }
        let api = path == "/v1" || path.starts_with("/v1/");
        let site = headers.get("sec-fetch-site").and_then(|h| h.to_str().ok());
        if api && site == Some("cross-site") {
            return Some(refused(
                StatusCode::FORBIDDEN,
                "refused: the request was made by another site's web page (Sec-Fetch-Site: cross-site); only this server's own page may use its API".to_string(),
            ));
        }
        if api {
            if let Some(token) = &self.token {
                let given = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|h| h.to_str().ok())
                    .and_then(|h| h.strip_prefix("Bearer "));
                if !given.is_some_and(|g| token.matches(g.trim())) {
                    let why = if given.is_some() {
                        "the bearer token is wrong"
                    } else {
                        "no 'Authorization: Bearer <token>' header"
                    };
                    return Some(refused(
                        StatusCode::UNAUTHORIZED,
                        format!("refused: {why}; this server requires the token of its --auth-token-file on every /v1 request"),
                    ));
                }
            }
        }
        None
    }

    /// The accepted form of `host` (lowercase; `:80` added when no port is named), if
    /// accepted.
    fn accepted(&self, host: &str) -> Option<String> {
        let host = host.trim().to_ascii_lowercase();
        let with_port = if host.ends_with(']') || !host.contains(':') {
            format!("{host}:80")
        } else {
            host
        };
        self.hosts.contains(&with_port).then_some(with_port)
    }

    fn is_own_origin(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .and_then(|h| self.accepted(h))
            .is_some()
    }

    fn wrong_host(&self, host: &str) -> ApiError {
        let shown = if host.is_empty() { "<none>" } else { host };
        refused(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "refused: the request names host '{shown}', which is not this server (it answers to {}); a web page that points its own name at this address may not use it",
                self.hosts.join(", ")
            ),
        )
    }
}

fn refused(status: StatusCode, error: String) -> ApiError {
    ApiError {
        status,
        error,
        field: None,
    }
}

/// The middleware: refuses what [`Access`] refuses, with the usual JSON error (401 also
/// carries `WWW-Authenticate: Bearer`).
pub async fn check(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    match access.refuse(request.method(), request.uri().path(), request.headers()) {
        None => next.run(request).await,
        Some(e) => {
            let status = e.status;
            let mut response = e.into_response();
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn loopback_names_and_the_listen_address_are_the_only_hosts() {
        let a = Access::new("0.0.0.0:0", "0.0.0.0:5115".parse().unwrap(), None);
        for ok in [
            "127.0.0.1:5115",
            "LOCALHOST:5115",
            "[::1]:5115",
            "0.0.0.0:5115",
        ] {
            assert!(a.accepted(ok).is_some(), "{ok}");
        }
        for bad in [
            "evil.example:5115",
            "localhost:80",
            "localhost",
            "127.0.0.1:5116",
            "",
        ] {
            assert!(a.accepted(bad).is_none(), "{bad}");
        }
        let named = Access::new("wizard.lan:5115", "10.0.0.2:5115".parse().unwrap(), None);
        assert!(named.accepted("wizard.lan:5115").is_some());
        assert!(named.accepted("10.0.0.2:5115").is_some());
    }

    #[test]
    fn the_token_is_required_on_the_api_only_and_never_shown() {
        let a = Access::new(
            "127.0.0.1:1",
            "127.0.0.1:1".parse().unwrap(),
            Some(AuthToken("s3cr3t".into())),
        );
        let host = ("host", "127.0.0.1:1");
        let api =
            |h: &[(&'static str, &str)]| a.refuse(&Method::GET, "/v1/connectors", &headers(h));
        assert!(a.refuse(&Method::GET, "/", &headers(&[host])).is_none());
        assert_eq!(api(&[host]).unwrap().status, StatusCode::UNAUTHORIZED);
        let wrong = api(&[host, ("authorization", "Bearer nope")]).unwrap();
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
        assert!(!wrong.error.contains("s3cr3t"));
        assert!(api(&[host, ("authorization", "Bearer s3cr3t")]).is_none());
        assert!(!format!("{a:?}").contains("s3cr3t"));
    }
}
