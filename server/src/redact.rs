//! Secrets out of replies (SPEC 10): every `authentication` object's key file `path`
//! becomes `<redacted>`.

use serde_json::Value;

pub const REDACTED: &str = "<redacted>";

/// `value` with every `{"type": "service-account-key-file", "path": ...}` path replaced.
pub fn redact(mut value: Value) -> Value {
    walk(&mut value);
    value
}

fn walk(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("type").and_then(Value::as_str) == Some("service-account-key-file") {
                if let Some(p) = m.get_mut("path") {
                    *p = Value::String(REDACTED.into());
                }
            }
            m.values_mut().for_each(walk);
        }
        Value::Array(a) => a.iter_mut().for_each(walk),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_paths_are_redacted_at_any_depth() {
        let v = serde_json::json!({"project": "p", "authentication": {"type": "service-account-key-file", "path": "/secret/k.json"},
            "deadLetter": {"authentication": {"type": "service-account-key-file", "path": "/secret/d.json"}}});
        let text = redact(v).to_string();
        assert!(!text.contains("/secret"), "{text}");
        assert_eq!(text.matches(REDACTED).count(), 2, "{text}");
    }
}
