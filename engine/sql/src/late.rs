//! Late rows into a table (issue 32, item 3; decision 0045): a source table's
//! `scan.late-rows.table` names a sink table, and a row that arrives late at a windowed
//! query over the source is written there as it was read, instead of being dropped. The
//! rows go through a query of their own, `INSERT INTO late SELECT <late's columns> FROM
//! source`, planned like any stateless query (exact casts, record ids) and fed by the
//! window, never by the source: its id is the windowed query's with `-late`.

use std::sync::Arc;

use super::error::SqlError;
use super::parse::InsertDef;
use super::plan::{is_checked_narrowing, plan_query, LATE_ROWS_OPTION};
use pubsub_engine_plan::{PlannedQuery, PlannedTable};
use pubsub_engine_spi::ConnectionType;

/// The late-rows table of `ins`'s source when `ins` is a windowed query (a stateless
/// query has no late rows).
pub(crate) fn table_of(tables: &[(String, PlannedTable)], ins: &InsertDef) -> Option<String> {
    if !super::aggregate::is_windowed(&ins.query) {
        return None;
    }
    tables
        .iter()
        .find(|(n, t)| *n == ins.source && t.connection.connection_type == ConnectionType::Source)
        .and_then(|(_, t)| t.late_rows.clone())
}

/// Adds, after `queries`, the query writing the late rows of each windowed query whose
/// source has [`LATE_ROWS_OPTION`], and has that window's first stage keep the source row.
///
/// Errors name the source table, the option and its value: no such table, a table that
/// is read, a column the source does not have or cannot fill exactly, or a table that
/// routes rows by an ordering key (late rows have no order to keep).
pub(crate) fn plan_late_queries(
    queries: &mut Vec<PlannedQuery>,
    find: &dyn Fn(&str) -> Result<PlannedTable, SqlError>,
) -> Result<(), SqlError> {
    let mut late_queries = Vec::new();
    for q in queries.iter_mut() {
        let (Some(window), Some(table)) = (q.window.as_mut(), q.source.late_rows.clone()) else {
            continue;
        };
        if window.window_at.is_none() {
            continue; // An updating aggregate has no window: no row is ever late.
        }
        let source = &q.source.connection.name;
        let e = |m: String| {
            SqlError(format!(
                "table '{source}': option '{LATE_ROWS_OPTION}' ('{table}'): {m}"
            ))
        };
        let sink = find(&table).map_err(|x| e(x.0))?;
        if sink.connection.connection_type != ConnectionType::Sink {
            return Err(e("is a table that is read; name a sink table".into()));
        }
        let columns: Vec<String> = sink
            .connection
            .schema
            .fields
            .iter()
            .map(|f| quote(&f.name))
            .collect();
        let text = format!(
            "INSERT INTO {} SELECT {} FROM {}",
            quote(&table),
            columns.join(", "),
            quote(source)
        );
        let ins = super::parse::parse_pipeline(&text)
            .map_err(|x| e(x.0))?
            .inserts
            .pop()
            .ok_or_else(|| e("the late rows' query did not parse".into()))?;
        // A late row is written past the source's row checks (a window set it aside), so a
        // value that does not fit a narrower column would fail the job, not the row:
        // every column holds its source column exactly.
        for f in &sink.connection.schema.fields {
            let Some(from) = q
                .source
                .connection
                .schema
                .fields
                .iter()
                .find(|s| s.name == f.name)
            else {
                continue; // named by plan_query below
            };
            if is_checked_narrowing(from.field_type, f.field_type) {
                return Err(e(format!(
                    "column '{}' ({}) of '{source}' cannot be written to column '{}' ({}): the late-rows table takes the source's columns by name, each as a type that holds it exactly: change the column of '{table}' (there is no query to CAST in)",
                    from.name,
                    from.field_type.sql_name(),
                    f.name,
                    f.field_type.sql_name()
                )));
            }
        }
        let what = format!("the late rows of '{source}' into '{table}'");
        let mut late = plan_query(
            format!("{}-late", q.id),
            &ins,
            &what,
            q.source.clone(),
            sink,
        )
        .map_err(|x| {
            e(format!(
                "{}; the late-rows table takes the source's columns by name, each as a type that holds it exactly: change the column of '{table}' (there is no query to CAST in)",
                without_position(&x.0)
            ))
        })?;
        if late.route_by.is_some() {
            return Err(e(
                "routes rows by an ordering key, and late rows have no order to keep; name a table without one".into(),
            ));
        }
        if window.before.unnest.is_some() {
            return Err(e(
                "takes the rows of a query that expands arrays with UNNEST below its window, where a late row is one element of a message, not the row read; write the late rows of a query without UNNEST".into(),
            ));
        }
        late.late_of = Some(q.id.clone());
        Arc::get_mut(window)
            .and_then(|w| Arc::get_mut(&mut w.before))
            .expect("a query's window plan is not shared while it is planned")
            .keep_source = true;
        q.late = Some(Arc::new(late.clone()));
        late_queries.push(late);
    }
    queries.extend(late_queries);
    Ok(())
}

/// `message` without its `(line N, column M)`: a place in the generated INSERT, which the
/// user never wrote.
fn without_position(message: &str) -> String {
    let Some(i) = message.find(" (line ") else {
        return message.to_string();
    };
    let end = message[i..].find(')').map_or(message.len(), |j| i + j + 1);
    format!("{}{}", &message[..i], &message[end..])
}

/// `name` as a quoted SQL identifier (sqlparser doubles a quote inside it).
fn quote(name: &str) -> String {
    sqlparser::ast::Ident::with_quote('"', name).to_string()
}
