//! The `CREATE TABLE` statement of a table made in the wizard: columns, then the
//! connector, the profile, the table's options (only those that differ from defaults)
//! and the format, each on its own line.

use pubsub_schema::{Authentication, PubSubProfile, PubSubTable};
use pubsub_table_options::{profile_to_options, table_to_options, NotExpressible};

use crate::columns::{ident, literal, Columns};

/// How the statement names the profile.
pub enum ProfileRef<'a> {
    /// Inline (`project`, `emulator-endpoint` / `service-account-key-file`): for checking
    /// the statement, or a profile without a secret.
    Inline(&'a PubSubProfile),
    /// `'connection-profile' = 'name'`, resolved by `run` from the same data directory:
    /// keeps a key file's path out of the statement (SPEC 10).
    Saved(&'a str),
}

/// The profile reference a shown statement uses: inline unless it holds a secret.
pub fn shown_ref<'a>(name: &'a str, profile: &'a PubSubProfile) -> ProfileRef<'a> {
    match profile.authentication {
        Authentication::ServiceAccountKeyFile { .. } => ProfileRef::Saved(name),
        _ => ProfileRef::Inline(profile),
    }
}

/// `CREATE TABLE name (...) WITH (...);`. Errors when SQL options cannot hold the config
/// (see [`table_to_options`]).
pub fn create_table(
    name: &str,
    profile: ProfileRef<'_>,
    table: &PubSubTable,
    columns: &Columns,
) -> Result<String, NotExpressible> {
    let mut options = vec![("connector".to_string(), "pubsub".to_string())];
    match profile {
        ProfileRef::Inline(p) => options.extend(profile_to_options(p)),
        ProfileRef::Saved(n) => options.push((
            pubsub_table_options::CONNECTION_PROFILE.to_string(),
            n.to_string(),
        )),
    }
    options.extend(table_to_options(table)?);
    options.push(("format".into(), columns.format_option().into()));
    let cols: Vec<String> = columns
        .sql_columns()
        .into_iter()
        .map(|c| format!("    {c}"))
        .collect();
    let opts: Vec<String> = options
        .iter()
        .map(|(k, v)| format!("    {} = {}", literal(k), literal(v)))
        .collect();
    Ok(format!(
        "CREATE TABLE {} (\n{}\n) WITH (\n{}\n);",
        ident(name),
        cols.join(",\n"),
        opts.join(",\n")
    ))
}
