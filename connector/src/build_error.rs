//! The error every builder's `build()` returns: which option, the rejected value, why.
//! Options are named by their builder setter (`parallel_pull_count`), which is also the
//! table config's field name; the SQL layer renames them to `WITH` keys
//! (`pubsub_table_options::sql_key`), so one rule serves Rust, SQL and the UI.

use std::fmt;
use std::time::Duration;

/// A rejected builder value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    /// The builder setter / config field that holds the bad value.
    pub option: &'static str,
    /// The rejected value as given (durations as `1500ms`, sizes in bytes).
    pub value: String,
    /// Why, in lower case. `{other}` stands for [`BuildError::other`], named by the
    /// renderer.
    reason: String,
    /// A second option the rule involves (e.g. `min` < `max`), if any.
    pub other: Option<&'static str>,
}

impl BuildError {
    pub fn new(option: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        BuildError {
            option,
            value: value.to_string(),
            reason: reason.into(),
            other: None,
        }
    }

    /// A rule between `option` and `other`; `reason` names it as `{other}`.
    pub fn between(
        option: &'static str,
        other: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        BuildError {
            other: Some(other),
            ..BuildError::new(option, value, reason)
        }
    }

    /// The reason with the other option named by `name` (e.g. its SQL key).
    pub fn reason_with(&self, name: impl Fn(&str) -> String) -> String {
        match self.other {
            Some(o) => self.reason.replace("{other}", &format!("'{}'", name(o))),
            None => self.reason.clone(),
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "option '{}' is invalid: {}, was '{}'",
            self.option,
            self.reason_with(str::to_string),
            self.value
        )
    }
}

impl std::error::Error for BuildError {}

/// A duration as users write it: `1500ms`, `30s`.
pub fn show(d: Duration) -> String {
    if d.subsec_nanos() % 1_000_000 != 0 {
        format!("{}ns", d.as_nanos())
    } else if d.subsec_millis() != 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

/// `d` in whole milliseconds, or an error for `option` (a finer value would be rounded).
pub fn whole_ms(option: &'static str, d: Duration) -> Result<u64, BuildError> {
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(BuildError::new(
            option,
            show(d),
            "must be a whole number of milliseconds",
        ));
    }
    u64::try_from(d.as_millis())
        .map_err(|_| BuildError::new(option, show(d), "must be at most u64::MAX milliseconds"))
}

/// `v` if positive, else an error for `option`.
pub fn positive(option: &'static str, v: u64) -> Result<u64, BuildError> {
    if v == 0 {
        return Err(BuildError::new(option, v, "must be positive"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_with_setter_names_or_a_renamer() {
        let e = BuildError::new("parallel_pull_count", 0, "must be positive");
        assert_eq!(
            e.to_string(),
            "option 'parallel_pull_count' is invalid: must be positive, was '0'"
        );
        let e = BuildError::between("min_x", "max_x", "20s", "must be less than {other}");
        assert_eq!(
            e.reason_with(|o| format!("scan.{o}")),
            "must be less than 'scan.max_x'"
        );
    }

    #[test]
    fn sub_millisecond_values_are_refused_not_rounded() {
        assert_eq!(whole_ms("x", Duration::from_millis(1500)).unwrap(), 1500);
        let e = whole_ms("x", Duration::from_micros(1500)).unwrap_err();
        assert_eq!(e.value, "1500000ns");
        assert_eq!(show(Duration::from_secs(30)), "30s");
    }
}
