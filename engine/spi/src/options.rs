//! SQL `WITH (...)` options (Arroyo's `ConnectorOptions`): every `pull_*` removes its key,
//! so whatever is left at the end is unknown and reported in one error.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use pubsub_engine_types::duration::{parse_data_size, parse_duration};

/// A rejected option. Every variant names the key; `Invalid` also shows the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// A required key is absent.
    Missing { key: String },
    /// A value did not parse or broke a rule.
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    /// Keys nobody pulled, each with an optional did-you-mean suggestion.
    Unknown { keys: Vec<(String, Option<String>)> },
    /// Two options that cannot be combined.
    Conflict { message: String },
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Missing { key } => write!(f, "required option '{key}' not set"),
            OptionError::Invalid { key, value, reason } => {
                write!(f, "option '{key}' is invalid: {reason}, was '{value}'")
            }
            OptionError::Unknown { keys } => {
                write!(f, "unknown options provided in WITH clause: ")?;
                for (i, (k, hint)) in keys.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "'{k}'")?;
                    if let Some(h) = hint {
                        write!(f, " (did you mean '{h}'?)")?;
                    }
                }
                Ok(())
            }
            OptionError::Conflict { message } => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for OptionError {}

/// The options of one table, keyed by option name. Values are the literal text written
/// in SQL (quotes removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectorOptions {
    options: BTreeMap<String, String>,
}

impl ConnectorOptions {
    pub fn new(options: impl IntoIterator<Item = (String, String)>) -> Self {
        ConnectorOptions {
            options: options.into_iter().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// Sets `key` unless it is already present (e.g. `--emulator` filling in an endpoint).
    pub fn insert_if_absent(&mut self, key: &str, value: &str) {
        self.options
            .entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }

    /// The value of `key` as written, if present (not pulled).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// Keys still present, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.options.keys().cloned().collect()
    }

    /// Removes and returns `key`, or `Missing`.
    pub fn pull_str(&mut self, key: &str) -> Result<String, OptionError> {
        self.pull_opt_str(key)?.ok_or_else(|| OptionError::Missing {
            key: key.to_string(),
        })
    }

    /// Removes and returns `key` if present.
    pub fn pull_opt_str(&mut self, key: &str) -> Result<Option<String>, OptionError> {
        Ok(self.options.remove(key))
    }

    /// Removes `key` and parses it with `parse`; the parser's message becomes the reason.
    pub fn pull_opt_with<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, OptionError> {
        match self.options.remove(key) {
            None => Ok(None),
            Some(v) => parse(&v)
                .map(Some)
                .map_err(|reason| invalid(key, &v, reason)),
        }
    }

    /// An unsigned integer.
    pub fn pull_opt_u64(&mut self, key: &str) -> Result<Option<u64>, OptionError> {
        self.pull_opt_with(key, |v| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| "must be a non-negative integer".to_string())
        })
    }

    /// An integer > 0 (`must be positive`).
    pub fn pull_opt_nonzero_u64(&mut self, key: &str) -> Result<Option<u64>, OptionError> {
        self.pull_opt_with(key, |v| match v.trim().parse::<i128>() {
            Ok(n) if n > 0 && n <= u64::MAX as i128 => Ok(n as u64),
            Ok(_) => Err("must be positive".to_string()),
            Err(_) => Err("must be a positive integer".to_string()),
        })
    }

    /// `true`/`yes` or `false`/`no`.
    pub fn pull_opt_bool(&mut self, key: &str) -> Result<Option<bool>, OptionError> {
        self.pull_opt_with(key, |v| match v.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" => Ok(true),
            "false" | "no" => Ok(false),
            _ => {
                Err("must be true or false (yes and no are accepted too, in any case)".to_string())
            }
        })
    }

    /// A duration such as `'30s'`, `'500ms'`, `'5 min'`.
    pub fn pull_opt_duration(&mut self, key: &str) -> Result<Option<Duration>, OptionError> {
        self.pull_opt_with(key, parse_duration)
    }

    /// A data size in bytes such as `'64mb'` or `'1048576'`.
    pub fn pull_opt_data_size_bytes(&mut self, key: &str) -> Result<Option<u64>, OptionError> {
        self.pull_opt_with(key, parse_data_size)
    }

    /// Fails with `Unknown` if any key is left, suggesting the closest of `known`.
    pub fn finish(self, known: &[&str]) -> Result<(), OptionError> {
        if self.options.is_empty() {
            return Ok(());
        }
        let keys = self
            .options
            .into_keys()
            .map(|k| {
                let hint = closest(&k, known);
                (k, hint)
            })
            .collect();
        Err(OptionError::Unknown { keys })
    }
}

fn invalid(key: &str, value: &str, reason: String) -> OptionError {
    OptionError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    }
}

/// The known key closest to `key` (edit distance at most 3 and under half its length),
/// if any: the did-you-mean hint for a misspelled option key.
pub fn suggest(key: &str, known: &[&str]) -> Option<String> {
    closest(key, known)
}

/// The known key within edit distance 3 of `key` (and under half its length), if any;
/// failing that, the same match for `key` without its first dotted segment, so a key
/// given a namespace it does not have (`scan.subscriptionn`) still finds `subscription`.
fn closest(key: &str, known: &[&str]) -> Option<String> {
    let near = |key: &str| {
        known
            .iter()
            .map(|k| (edit_distance(key, k), *k))
            .filter(|(d, _)| *d <= 3 && *d * 2 < key.len().max(1))
            .min()
            .map(|(_, k)| k.to_string())
    };
    near(key).or_else(|| key.split_once('.').and_then(|(_, rest)| near(rest)))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> ConnectorOptions {
        ConnectorOptions::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn a_key_with_a_namespace_it_does_not_have_still_gets_a_hint() {
        let known = ["subscription", "topic", "scan.parallel-pull-count"];
        assert_eq!(
            suggest("scan.subscriptionn", &known).as_deref(),
            Some("subscription")
        );
        assert_eq!(suggest("sink.topic", &known).as_deref(), Some("topic"));
        assert_eq!(
            suggest("scan.paralel-pull-count", &known).as_deref(),
            Some("scan.parallel-pull-count")
        );
        assert_eq!(suggest("scan.zzz", &known), None);
    }

    #[test]
    fn pull_removes_and_leftovers_are_listed_together() {
        let mut o = opts(&[("topic", "t"), ("topik", "x"), ("zzz", "1")]);
        assert_eq!(o.pull_str("topic").unwrap(), "t");
        let err = o
            .finish(&["topic", "subscription"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "unknown options provided in WITH clause: 'topik' (did you mean 'topic'?), 'zzz'"
        );
    }

    #[test]
    fn invalid_values_name_key_and_value() {
        let mut o = opts(&[("scan.parallel-pull-count", "0")]);
        let err = o
            .pull_opt_nonzero_u64("scan.parallel-pull-count")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "option 'scan.parallel-pull-count' is invalid: must be positive, was '0'"
        );
        let mut o = opts(&[("d", "soon")]);
        assert!(o
            .pull_opt_duration("d")
            .unwrap_err()
            .to_string()
            .contains("'soon'"));
        let mut o = opts(&[]);
        assert_eq!(
            o.pull_str("project").unwrap_err().to_string(),
            "required option 'project' not set"
        );
    }
}
