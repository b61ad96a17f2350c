//! A lone `SELECT ... FROM table [WHERE ...]` over one table's columns, for showing sample
//! rows through it (the wizard's table test, issue 17): the same clauses, functions and
//! exactness rules as the SELECT of an INSERT.

use sqlparser::ast::{SetExpr, Statement, TableFactor};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::clauses::{at, check_query, object_name, StatementTokens};
use super::dialect::PipelineDialect;
use super::error::SqlError;
use super::select::plan_select;
use pubsub_engine_plan::SelectPlan;
use pubsub_engine_spi::ConnectionSchema;

/// Plans `sql`, one `SELECT <expressions> FROM <table> [WHERE <condition>]` (a trailing
/// `;` allowed), over `table`'s columns `schema`.
///
/// Errors, with the line and column in `sql`: a syntax error, another statement, more
/// than one SELECT, a FROM that names another table, and every refusal of an INSERT's
/// SELECT (unimplemented clauses, unknown columns or functions, inexact coercions,
/// replay-unsafe functions).
pub fn plan_sample_select(
    sql: &str,
    table: &str,
    schema: &ConnectionSchema,
) -> Result<SelectPlan, SqlError> {
    let dialect = PipelineDialect::default();
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError(format!("SQL syntax error: {e}")))?;
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens.clone());
    let st = parser
        .parse_statement()
        .map_err(|e| SqlError(format!("SQL syntax error: {e}")))?;
    let end = parser.index().min(tokens.len());
    let tokens = StatementTokens {
        tokens: &tokens[..end],
        after: None,
    };
    while parser.consume_token(&Token::SemiColon) {}
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(at(
            next.span.start,
            format!(
                "SQL syntax error: one SELECT only, found {} after it",
                next.token
            ),
        ));
    }
    let Statement::Query(query) = st else {
        return Err(at(
            tokens.start(),
            "expected one SELECT ... FROM the table".into(),
        ));
    };
    let what = "SELECT";
    check_query(&query, what, &tokens)?;
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err(at(
            tokens.start(),
            format!("{what}: one SELECT only (no UNION ALL here)"),
        ));
    };
    let from = match &select.from[0].relation {
        TableFactor::Table { name, .. } => object_name(name),
        _ => {
            return Err(at(
                tokens.start(),
                format!("{what}: must read table '{table}'"),
            ))
        }
    };
    if from != table {
        return Err(at(
            tokens.find(sqlparser::keywords::Keyword::FROM),
            format!("{what}: reads '{from}', but this table is '{table}'"),
        ));
    }
    plan_select(&query, table, schema, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_engine_spi::{BadData, FieldType, Format, SourceField, TimestampFormat};

    fn schema() -> ConnectionSchema {
        ConnectionSchema {
            event_time: None,
            format: Format::Json,
            timestamp_format: TimestampFormat::default(),
            bad_data: BadData::Fail,
            fields: vec![SourceField {
                name: "price".into(),
                field_type: FieldType::Bigint,
                required: true,
                metadata_key: None,
            }],
        }
    }

    #[test]
    fn a_lone_select_plans_and_everything_else_is_refused_with_its_position() {
        let p = plan_sample_select(
            "SELECT price * 2 AS twice FROM bids WHERE price > 10;",
            "bids",
            &schema(),
        )
        .unwrap();
        assert_eq!(p.fields[0].name, "twice");
        for (sql, words) in [
            (
                "SELECT price FROM other",
                "reads 'other', but this table is 'bids' (line 1, column 14)",
            ),
            ("SELECT price FROM bids LIMIT 1", "LIMIT is not supported"),
            ("SELECT price FROM bids; SELECT 1", "one SELECT only"),
            ("DELETE FROM bids", "expected one SELECT"),
            ("SELECT pryce FROM bids", "pryce"),
            ("SELECT now() FROM bids", "now"),
        ] {
            let e = plan_sample_select(sql, "bids", &schema()).unwrap_err().0;
            assert!(e.contains(words), "{sql}: {e}");
        }
    }
}
