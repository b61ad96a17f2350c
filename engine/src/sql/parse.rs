//! Statements -> table and insert definitions (no connector knowledge yet).

use std::fmt;

use sqlparser::ast::{
    ColumnDef, ColumnOption, CreateTableOptions, DataType, Expr, ObjectName, SelectItem, SetExpr,
    SqlOption, Statement, TableFactor, Value,
};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

use super::dialect::PipelineDialect;
use crate::spi::{ConnectorOptions, FieldType, SourceField};

/// A SQL error: syntax errors carry sqlparser's `Line: L, Column: C`; planning errors name
/// the table, column or option at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError(pub String);

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SqlError {}

fn err<T>(msg: impl Into<String>) -> Result<T, SqlError> {
    Err(SqlError(msg.into()))
}

/// `CREATE TABLE name (columns) WITH (options)`.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    pub name: String,
    pub fields: Vec<SourceField>,
    pub options: ConnectorOptions,
}

/// What an INSERT selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// `SELECT *`
    All,
    /// `SELECT a, b` (plain column names, in order)
    Columns(Vec<String>),
}

/// `INSERT INTO sink [(columns)] SELECT ... FROM source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertDef {
    pub sink: String,
    /// The target column list, if the INSERT names one.
    pub columns: Option<Vec<String>>,
    pub source: String,
    pub projection: Projection,
}

impl fmt::Display for InsertDef {
    /// The statement in canonical form, for errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "INSERT INTO {}", self.sink)?;
        if let Some(cols) = &self.columns {
            write!(f, " ({})", cols.join(", "))?;
        }
        match &self.projection {
            Projection::All => write!(f, " SELECT *")?,
            Projection::Columns(c) => write!(f, " SELECT {}", c.join(", "))?,
        }
        write!(f, " FROM {}", self.source)
    }
}

/// Every statement of a pipeline file, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PipelineSql {
    pub tables: Vec<TableDef>,
    pub inserts: Vec<InsertDef>,
}

/// Parses a pipeline file: statements separated by `;`.
///
/// Errors: syntax errors (with line and column), unsupported statements or types, and
/// option values that are not literals.
pub fn parse_pipeline(sql: &str) -> Result<PipelineSql, SqlError> {
    let statements = Parser::parse_sql(&PipelineDialect::default(), sql)
        .map_err(|e| SqlError(format!("SQL syntax error: {e}")))?;
    let mut out = PipelineSql::default();
    for st in statements {
        match st {
            Statement::CreateTable(ct) => {
                let name = object_name(&ct.name);
                if out.tables.iter().any(|t| t.name == name) {
                    return err(format!("table '{name}' is defined twice"));
                }
                let fields = ct
                    .columns
                    .iter()
                    .map(|c| column(&name, c))
                    .collect::<Result<Vec<_>, _>>()?;
                if fields.is_empty() {
                    return err(format!("table '{name}' declares no columns"));
                }
                for (i, f) in fields.iter().enumerate() {
                    if fields[..i].iter().any(|g| g.name == f.name) {
                        return err(format!("table '{name}' declares column '{}' twice", f.name));
                    }
                }
                let options = match &ct.table_options {
                    CreateTableOptions::With(opts) => table_options(&name, opts)?,
                    CreateTableOptions::None => ConnectorOptions::default(),
                    other => {
                        return err(format!(
                            "table '{name}': use WITH (...) for options, not {other}"
                        ))
                    }
                };
                out.tables.push(TableDef {
                    name,
                    fields,
                    options,
                });
            }
            Statement::Insert(ins) => {
                let sink = match &ins.table {
                    sqlparser::ast::TableObject::TableName(n) => object_name(n),
                    other => return err(format!("INSERT INTO {other} is not supported")),
                };
                let Some(source) = ins.source.as_ref() else {
                    return err(format!("INSERT INTO {sink} needs a SELECT"));
                };
                let SetExpr::Select(select) = source.body.as_ref() else {
                    return err(format!(
                        "INSERT INTO {sink}: only a plain SELECT ... FROM is supported"
                    ));
                };
                if select.from.len() != 1 || !select.from[0].joins.is_empty() {
                    return err(format!(
                        "INSERT INTO {sink}: SELECT must read exactly one table"
                    ));
                }
                let TableFactor::Table { name, .. } = &select.from[0].relation else {
                    return err(format!("INSERT INTO {sink}: SELECT must read a table"));
                };
                if select.selection.is_some()
                    || !matches!(select.group_by, sqlparser::ast::GroupByExpr::Expressions(ref v, _) if v.is_empty())
                {
                    return err(format!(
                        "INSERT INTO {sink}: WHERE and GROUP BY are not supported yet"
                    ));
                }
                let projection = projection(&sink, &select.projection)?;
                let columns = if ins.columns.is_empty() {
                    None
                } else {
                    Some(ins.columns.iter().map(|c| object_name(c)).collect())
                };
                out.inserts.push(InsertDef {
                    sink,
                    columns,
                    source: object_name(name),
                    projection,
                });
            }
            other => {
                let text = other.to_string();
                let head: String = text.chars().take(40).collect();
                return err(format!("unsupported statement: {head}... (only CREATE TABLE and INSERT INTO ... SELECT)"));
            }
        }
    }
    Ok(out)
}

fn object_name(n: &ObjectName) -> String {
    n.0.iter()
        .map(|p| {
            p.as_ident()
                .map(|i| i.value.clone())
                .unwrap_or_else(|| p.to_string())
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn column(table: &str, c: &ColumnDef) -> Result<SourceField, SqlError> {
    // A length or precision would be a promise the connector does not keep.
    let unenforced = match &c.data_type {
        DataType::Varchar(Some(_)) | DataType::String(Some(_)) => {
            Some("TEXT has no length limit: declare TEXT")
        }
        DataType::Timestamp(Some(p), _) if *p != 9 => {
            Some("TIMESTAMP keeps nanoseconds: declare TIMESTAMP (or TIMESTAMP(9))")
        }
        DataType::Timestamp(_, tz)
            if matches!(
                tz,
                sqlparser::ast::TimezoneInfo::WithTimeZone | sqlparser::ast::TimezoneInfo::Tz
            ) =>
        {
            Some("TIMESTAMP is UTC without a zone: declare TIMESTAMP")
        }
        _ => None,
    };
    if let Some(hint) = unenforced {
        return err(format!(
            "table '{table}' column '{}': type {} is not supported: {hint}",
            c.name.value, c.data_type
        ));
    }
    let field_type = match &c.data_type {
        DataType::Text | DataType::Varchar(_) | DataType::String(_) => FieldType::Text,
        DataType::BigInt(_) | DataType::Int8(_) => FieldType::Bigint,
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => FieldType::Int,
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float8 => FieldType::Double,
        DataType::Boolean | DataType::Bool => FieldType::Boolean,
        DataType::Timestamp(_, _) => FieldType::Timestamp,
        DataType::Float(_) | DataType::Real | DataType::Float4 => FieldType::Float,
        DataType::Bytea => FieldType::Bytea,
        DataType::JSON | DataType::JSONB => FieldType::Json,
        other => {
            return err(format!(
                "table '{table}' column '{}': type {other} is not supported (TEXT, BIGINT, INT, DOUBLE, FLOAT, BOOLEAN, TIMESTAMP, BYTEA, JSON)",
                c.name.value
            ))
        }
    };
    let mut required = false;
    let mut metadata_key = None;
    for opt in &c.options {
        match &opt.option {
            ColumnOption::NotNull => required = true,
            ColumnOption::Null => required = false,
            ColumnOption::DialectSpecific(tokens) => match tokens.last() {
                Some(Token::SingleQuotedString(k)) => metadata_key = Some(k.clone()),
                _ => {
                    return err(format!(
                        "table '{table}' column '{}': bad METADATA clause",
                        c.name.value
                    ))
                }
            },
            other => {
                return err(format!(
                    "table '{table}' column '{}': column option {other} is not supported",
                    c.name.value
                ))
            }
        }
    }
    Ok(SourceField {
        name: c.name.value.clone(),
        field_type,
        required,
        metadata_key,
    })
}

fn table_options(table: &str, opts: &[SqlOption]) -> Result<ConnectorOptions, SqlError> {
    let mut pairs = Vec::new();
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            return err(format!(
                "table '{table}': option {o} must be 'key' = 'value'"
            ));
        };
        let key = object_name(key);
        let value = match value {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                Value::Number(n, _) => n.clone(),
                Value::Boolean(b) => b.to_string(),
                other => {
                    return err(format!(
                        "table '{table}': option '{key}' has unsupported value {other}"
                    ))
                }
            },
            Expr::Identifier(i) => i.value.clone(),
            other => {
                return err(format!(
                    "table '{table}': option '{key}' must be a literal, was {other}"
                ))
            }
        };
        if pairs.iter().any(|(k, _): &(String, String)| *k == key) {
            return err(format!("table '{table}': option '{key}' is given twice"));
        }
        pairs.push((key, value));
    }
    Ok(ConnectorOptions::new(pairs))
}

fn projection(sink: &str, items: &[SelectItem]) -> Result<Projection, SqlError> {
    if let [SelectItem::Wildcard(_)] = items {
        return Ok(Projection::All);
    }
    let mut cols = Vec::new();
    for item in items {
        match item {
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => cols.push(i.value.clone()),
            other => {
                return err(format!(
                    "INSERT INTO {sink}: select item {other} is not supported yet (plain column names or *)"
                ))
            }
        }
    }
    Ok(Projection::Columns(cols))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_insert() {
        let p = parse_pipeline(
            "CREATE TABLE bids (auction BIGINT NOT NULL, price BIGINT, id TEXT METADATA FROM 'message-id')
               WITH ('connector' = 'pubsub', 'scan.parallel-pull-count' = 2, format = 'json');
             CREATE TABLE out (auction BIGINT, price BIGINT) WITH ('connector' = 'pubsub', 'topic' = 't');
             INSERT INTO out SELECT auction, price FROM bids;",
        )
        .unwrap();
        assert_eq!(p.tables.len(), 2);
        let bids = &p.tables[0];
        assert!(bids.fields[0].required);
        assert_eq!(bids.fields[2].metadata_key.as_deref(), Some("message-id"));
        assert_eq!(
            bids.options.keys(),
            vec!["connector", "format", "scan.parallel-pull-count"]
        );
        assert_eq!(
            p.inserts[0],
            InsertDef {
                sink: "out".into(),
                columns: None,
                source: "bids".into(),
                projection: Projection::Columns(vec!["auction".into(), "price".into()])
            }
        );
    }

    #[test]
    fn syntax_error_points_at_line_and_column() {
        let e = parse_pipeline(
            "CREATE TABLE t (a BIGINT)\nWITH ('x' = 'y');\nINSERT INTO SELEC a FROM t;",
        )
        .unwrap_err();
        assert!(e.0.contains("Line: 3"), "{e}");
        assert!(e.0.contains("Column:"), "{e}");
    }

    #[test]
    fn lengths_and_precisions_that_would_not_be_enforced_are_refused() {
        for ty in ["VARCHAR(3)", "TIMESTAMP(3)", "TIMESTAMP WITH TIME ZONE"] {
            let e =
                parse_pipeline(&format!("CREATE TABLE t (a {ty}) WITH ('x' = 'y')")).unwrap_err();
            assert!(
                e.0.contains("column 'a'") && e.0.contains("is not supported"),
                "{ty}: {e}"
            );
        }
        for ty in [
            "VARCHAR",
            "TIMESTAMP",
            "TIMESTAMP(9)",
            "TIMESTAMP WITHOUT TIME ZONE",
            "TEXT",
        ] {
            parse_pipeline(&format!("CREATE TABLE t (a {ty}) WITH ('x' = 'y')")).unwrap();
        }
    }

    #[test]
    fn unsupported_type_names_column() {
        let e = parse_pipeline("CREATE TABLE t (a BLOB) WITH ('x' = 'y')").unwrap_err();
        assert!(e.0.contains("column 'a'"), "{e}");
    }
}
