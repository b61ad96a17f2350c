//! `CREATE VIEW name AS SELECT ...` (issue 32, item 3; Arroyo's and Flink's form): a view
//! is a name for a query, inlined where it is read, as a subquery in FROM (`(SELECT ...)
//! AS name`), at parse time. Nothing of it exists at run time.
//!
//! A view must aggregate over a window: the windowed planner reads a windowed aggregate
//! in FROM; a view of a stateless SELECT is refused where it is read, with the way on
//! (write its SELECT in the INSERT).

use std::collections::HashMap;

use sqlparser::ast::{ObjectName, Query, SetExpr, Spanned, Statement, TableAlias, TableFactor};

use super::clauses::{at, check_query, object_name, StatementTokens};
use super::error::SqlError;

/// The views of a pipeline file so far, by name.
#[derive(Default)]
pub(crate) struct Views {
    queries: HashMap<String, Query>,
}

impl Views {
    /// Takes a `CREATE VIEW` statement (`st`: its tokens); `tables` are the names of the
    /// tables declared so far.
    ///
    /// Errors, with their position: a clause other than `CREATE VIEW name AS query`
    /// (`OR REPLACE`, `MATERIALIZED`, a column list, options, ...), a name already taken by
    /// a table or a view, and every clause of the query a SELECT refuses.
    pub fn create(
        &mut self,
        statement: &Statement,
        st: &StatementTokens,
        tables: &[String],
    ) -> Result<(), SqlError> {
        let Statement::CreateView {
            or_alter,
            or_replace,
            materialized,
            secure,
            name,
            name_before_not_exists: _,
            columns,
            query,
            options,
            cluster_by,
            comment,
            with_no_schema_binding,
            if_not_exists,
            temporary,
            to,
            params,
        } = statement
        else {
            unreachable!("called for CREATE VIEW only");
        };
        let view = object_name(name);
        let what = format!("CREATE VIEW {view}");
        let refuse = |clause: &str| {
            Err(at(
                st.start(),
                format!("{what}: {clause} is not supported (write CREATE VIEW name AS SELECT ...)"),
            ))
        };
        if *or_alter || *or_replace {
            return refuse("OR REPLACE / OR ALTER");
        }
        if *materialized {
            return refuse("MATERIALIZED (a view is inlined where it is read; nothing is stored)");
        }
        if *secure || *temporary || *if_not_exists || *with_no_schema_binding {
            return refuse("SECURE, TEMPORARY, IF NOT EXISTS or WITH NO SCHEMA BINDING");
        }
        if !columns.is_empty() {
            return refuse("a column list (name the columns in the SELECT, with AS)");
        }
        if !matches!(options, sqlparser::ast::CreateTableOptions::None)
            || !cluster_by.is_empty()
            || comment.is_some()
            || to.is_some()
            || params.is_some()
        {
            return refuse("options, CLUSTER BY, COMMENT, TO or view parameters");
        }
        if tables.contains(&view) || self.queries.contains_key(&view) {
            return Err(at(
                name.span().start,
                format!("{what}: '{view}' is already the name of a table or a view"),
            ));
        }
        check_query(query, &what, st)?;
        let mut query = query.as_ref().clone();
        self.inline(&mut query.body)?;
        self.queries.insert(view, query);
        Ok(())
    }

    /// Whether `name` names a view.
    pub fn contains(&self, name: &str) -> bool {
        self.queries.contains_key(name)
    }

    /// Replaces every view read in FROM within `body` by its query, as `(query) AS name`.
    ///
    /// Errors: a view whose query neither aggregates over a window nor calls UNNEST (a
    /// stateless view is not supported yet), at the position of its name.
    pub fn inline(&self, body: &mut SetExpr) -> Result<(), SqlError> {
        match body {
            SetExpr::Select(s) => {
                for t in &mut s.from {
                    self.inline_factor(&mut t.relation)?;
                }
                Ok(())
            }
            SetExpr::Query(q) => self.inline(&mut q.body),
            SetExpr::SetOperation { left, right, .. } => {
                self.inline(left)?;
                self.inline(right)
            }
            _ => Ok(()),
        }
    }

    fn inline_factor(&self, t: &mut TableFactor) -> Result<(), SqlError> {
        match t {
            TableFactor::Table { name, alias, .. } => {
                let Some(query) = self.queries.get(&object_name(name)) else {
                    return Ok(());
                };
                // A view of UNNEST is read by an aggregate or a stateless SELECT
                // (`unnest_below.rs`).
                let unnests = super::select::find_function(query, "unnest").is_some();
                if !super::aggregate::is_windowed(query) && !unnests {
                    return Err(at(
                        name.span().start,
                        format!(
                            "view '{}' does not aggregate over a window: a view of a stateless SELECT is not supported yet (but for one of UNNEST); write its SELECT in the INSERT",
                            object_name(name)
                        ),
                    ));
                }
                let alias = alias.clone().unwrap_or_else(|| TableAlias {
                    name: last_ident(name),
                    columns: vec![],
                });
                *t = TableFactor::Derived {
                    lateral: false,
                    subquery: Box::new(query.clone()),
                    alias: Some(alias),
                };
                Ok(())
            }
            TableFactor::Derived { subquery, .. } => self.inline(&mut subquery.body),
            _ => Ok(()),
        }
    }
}

fn last_ident(name: &ObjectName) -> sqlparser::ast::Ident {
    sqlparser::ast::Ident::new(object_name(name))
}

#[cfg(test)]
mod tests {
    use crate::parse_pipeline;

    const TABLES: &str = "CREATE TABLE src (page TEXT, v BIGINT) WITH ('x' = 'y');\nCREATE TABLE out (a TEXT) WITH ('x' = 'y');\n";
    const PER_PAGE: &str = "SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, page, count(*) AS n FROM src GROUP BY window, page";

    fn refused(sql: &str) -> String {
        parse_pipeline(&format!("{TABLES}{sql}")).unwrap_err().0
    }

    #[test]
    fn a_view_is_its_query_in_from_where_it_is_read() {
        let viewed = parse_pipeline(&format!(
            "{TABLES}CREATE VIEW per_page AS {PER_PAGE};\nINSERT INTO out SELECT page FROM per_page WHERE n > 1;"
        ))
        .unwrap();
        let inline = parse_pipeline(&format!(
            "{TABLES}INSERT INTO out SELECT page FROM ({PER_PAGE}) AS per_page WHERE n > 1;"
        ))
        .unwrap();
        assert_eq!(viewed.inserts[0].source, "src");
        assert!(viewed.inserts[0].is_windowed());
        assert_eq!(
            viewed.inserts[0].query.to_string(),
            inline.inserts[0].query.to_string()
        );
        // A view over a view, read under another alias.
        let nested = parse_pipeline(&format!(
            "{TABLES}CREATE VIEW per_page AS {PER_PAGE};\nCREATE VIEW busy AS SELECT page, n FROM per_page WHERE n > 1;\nINSERT INTO out SELECT page FROM busy AS b;"
        ))
        .unwrap();
        assert_eq!(nested.inserts[0].source, "src");
        assert!(
            nested.inserts[0]
                .query
                .to_string()
                .contains("FROM (SELECT page, n FROM (SELECT TUMBLE"),
            "{}",
            nested.inserts[0].query
        );
    }

    #[test]
    fn views_are_refused_with_their_reason_and_position() {
        let e = refused(&format!("CREATE MATERIALIZED VIEW v AS {PER_PAGE};"));
        assert!(
            e.contains("MATERIALIZED") && e.contains("(line 3, column 1)"),
            "{e}"
        );
        let e = refused(&format!("CREATE VIEW v (a, b, c) AS {PER_PAGE};"));
        assert!(e.contains("a column list"), "{e}");
        let e = refused(&format!("CREATE VIEW src AS {PER_PAGE};"));
        assert!(
            e.contains("'src' is already the name of a table or a view"),
            "{e}"
        );
        let e = refused(&format!(
            "CREATE VIEW v AS {PER_PAGE};\nCREATE TABLE v (a TEXT) WITH ('x' = 'y');"
        ));
        assert!(e.contains("table 'v': the name is already a view's"), "{e}");
        let e = refused(&format!("CREATE VIEW v AS {PER_PAGE} ORDER BY n;"));
        assert!(e.contains("ORDER BY"), "{e}");
        let e = refused("CREATE VIEW plain AS SELECT page FROM src WHERE v > 0;\nINSERT INTO out SELECT page FROM plain;");
        assert!(
            e.contains("view 'plain' does not aggregate over a window")
                && e.contains("(line 4, column 34)"),
            "{e}"
        );
    }
}
