//! The one redaction of a URL the product prints (a `--state-dir`, an object-store
//! location, an endpoint): what is left names the place, never a credential (SPEC 10).

/// `value` as it may be logged: for a URL (`scheme://…` or `scheme:/…`, the scheme two
/// or more characters long), the userinfo becomes `***` (for `abfs`/`abfss`, whose user
/// part names the container, only the password does), every query value becomes `***`
/// (names are kept, so a reader sees that e.g. a `sig` was passed; an item without `=`
/// becomes `***`, as it may be a bare token), and a fragment becomes `#***`. Everything
/// else is kept as written, so a URL without secrets is returned unchanged. Anything that
/// is not a URL (a plain path, `host:port`) is returned unchanged.
///
/// It works on the text, not on a parsed URL, so that a malformed URL (a space, an
/// unencoded `?` or `/` in a password) is redacted too: when in doubt it hides more.
pub fn redact_url(value: &str) -> String {
    let Some(scheme) = url_scheme(value) else {
        return value.to_string();
    };
    let after = &value[scheme.len() + 1..];
    let mut out = format!("{scheme}:");
    let tail = match after.strip_prefix("//") {
        Some(rest) => {
            out.push_str("//");
            let (userinfo, tail) = split_userinfo(rest);
            if let Some(userinfo) = userinfo {
                out.push_str(&hide_userinfo(scheme, userinfo));
                out.push('@');
            }
            tail
        }
        None => after,
    };
    let (tail, fragment) = match tail.split_once('#') {
        Some((t, f)) => (t, Some(f)),
        None => (tail, None),
    };
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    out.push_str(path);
    if let Some(query) = query {
        out.push('?');
        out.push_str(&hide_query(query));
    }
    if let Some(fragment) = fragment {
        out.push_str(if fragment.is_empty() { "#" } else { "#***" });
    }
    out
}

/// The URL scheme `value` starts with (`scheme:/`, the scheme two or more characters long
/// so that a Windows drive `C:/` stays a path), or `None` for a plain path.
pub fn url_scheme(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = scheme.len() >= 2
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (valid && rest.starts_with('/')).then_some(scheme)
}

/// Splits `user:pass@host/...` (the text after `//`) into the userinfo and the rest.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let at = authority.rfind('@').or_else(|| {
        // An unencoded '/' in a password ends the authority early (`user:pa/ss@host`):
        // told by a ':' not followed by a port number and an '@' before the query.
        let odd_port = authority
            .split_once(':')
            .is_some_and(|(_, port)| !port.chars().all(|c| c.is_ascii_digit()));
        let head = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
        odd_port.then(|| head.rfind('@')).flatten()
    });
    match at {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

fn hide_userinfo(scheme: &str, userinfo: &str) -> String {
    let names_container = ["abfs", "abfss"]
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s));
    match userinfo.split_once(':') {
        Some((user, _)) if names_container => format!("{user}:***"),
        None if names_container => userinfo.to_string(),
        _ => "***".to_string(),
    }
}

fn hide_query(query: &str) -> String {
    query
        .split('&')
        .map(|item| match item.split_once('=') {
            _ if item.is_empty() => String::new(),
            Some((name, _)) => format!("{name}=***"),
            None => "***".to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_userinfo_and_query_are_hidden_for_every_scheme() {
        let cases = [
            (
                "s3://AKIA:SECRET@bucket/p?token=SECRET",
                "s3://***@bucket/p?token=***",
            ),
            (
                "az://container/p?sv=2022&sig=SECRET&se=2030",
                "az://container/p?sv=***&sig=***&se=***",
            ),
            ("gs://user@bucket/p#SECRET", "gs://***@bucket/p#***"),
            ("file:///tmp/x?sig=SECRET", "file:///tmp/x?sig=***"),
            (
                "https://user:SECRET@acct.blob.core.windows.net/c/p?sig=SECRET",
                "https://***@acct.blob.core.windows.net/c/p?sig=***",
            ),
            // A bare query item may itself be a token.
            ("https://host/p?SECRET&a=1", "https://host/p?***&a=***"),
            // The user of abfs names the container: only its password goes.
            (
                "abfss://container:SECRET@acct.dfs.core.windows.net/p?sig=SECRET",
                "abfss://container:***@acct.dfs.core.windows.net/p?sig=***",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn malformed_urls_are_redacted_too() {
        for url in [
            "s3://user:SECRET@bu cket/p?token=SECRET",
            "s3://user:pa/SECRET@bucket/p",
            "s3://user:pa?SECRET@bucket/p",
            "https://user:SECRET@host",
            "https://host?sig=SECRET",
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains("SECRET"), "{url} -> {shown}");
        }
        assert_eq!(
            redact_url("s3://user:pa/SECRET@bucket/p"),
            "s3://***@bucket/p"
        );
    }

    #[test]
    fn values_without_secrets_are_kept_as_written() {
        for value in [
            "/plain/path",
            "state",
            "C:/state",
            "127.0.0.1:8085",
            "gs://bucket/a/b",
            "file:///tmp/x",
            "file:/tmp/x",
            "https://host:8443/a@b",
            "abfss://container@acct.dfs.core.windows.net/p",
        ] {
            assert_eq!(redact_url(value), value);
        }
    }
}
