//! Every clause a statement may carry is either implemented or refused here, naming it and
//! its position (SPEC 8: "anything not implemented is refused at plan time, never
//! ignored"). The walks destructure sqlparser's structs without `..`, so a field added by a
//! new sqlparser version fails to compile until it is classified.

use sqlparser::ast::helpers::stmt_create_table::CreateTableBuilder;
use sqlparser::ast::{
    CreateTable, Distinct, GroupByExpr, HiveFormat, Insert, LimitClause, OnInsert, Query, Select,
    SelectFlavor, SelectItem, SetExpr, SetOperator, SetQuantifier, TableFactor, TableObject,
    TableWithJoins, WildcardAdditionalOptions,
};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan};

use super::error::SqlError;

/// The tokens of one statement, to find where a refused clause was written.
pub(crate) struct StatementTokens<'a> {
    pub tokens: &'a [TokenWithSpan],
    /// Keywords are looked for from here on (a SELECT's own clauses start at its SELECT,
    /// not at the INSERT INTO before it).
    pub after: Option<Location>,
}

impl StatementTokens<'_> {
    /// Where the statement starts.
    pub fn start(&self) -> Location {
        self.tokens
            .iter()
            .find(|t| !matches!(t.token, Token::Whitespace(_)))
            .map(|t| t.span.start)
            .unwrap_or(Location { line: 1, column: 1 })
    }

    /// The first unquoted use of `keyword` in the statement (from `after`), else its start.
    pub fn find(&self, keyword: Keyword) -> Location {
        self.find_any(&[keyword])
    }

    /// The first unquoted use of any of `keywords`, else the statement's start.
    pub fn find_any(&self, keywords: &[Keyword]) -> Location {
        let from = self.after.map_or((0, 0), |l| (l.line, l.column));
        self.tokens
            .iter()
            .filter(|t| (t.span.start.line, t.span.start.column) >= from)
            .find(|t| matches!(&t.token, Token::Word(w) if keywords.contains(&w.keyword) && w.quote_style.is_none()))
            .map(|t| t.span.start)
            .unwrap_or_else(|| self.start())
    }

    /// A refusal of `clause` (as written in SQL), located at `keyword`.
    pub fn refuse(&self, what: &str, clause: &str, keyword: Keyword, why: &str) -> SqlError {
        at(
            self.find(keyword),
            format!("{what}: {clause} is not supported{why}"),
        )
    }
}

/// `msg` followed by `(line L, column C)`.
pub(crate) fn at(loc: Location, msg: String) -> SqlError {
    SqlError(format!("{msg} (line {}, column {})", loc.line, loc.column))
}

const NOT_YET: &str = " yet";

/// Refuses every clause of `CREATE TABLE` but the name, the columns and `WITH (...)`: a
/// statement rebuilt from those three alone must equal the one written.
pub(crate) fn check_create_table(ct: &CreateTable, st: &StatementTokens) -> Result<(), SqlError> {
    // The parser always fills `hive_formats`, with nothing in it when none was written.
    let no_hive = Some(HiveFormat::default());
    // A plain `PRIMARY KEY (cols)` is taken (`parse::primary_key`); any other constraint not.
    let mut ct = ct.clone();
    ct.constraints
        .retain(|c| super::parse::plain_primary_key(c).is_none());
    let ct = &ct;
    let rebuilt = CreateTableBuilder::new(ct.name.clone())
        .columns(ct.columns.clone())
        .table_options(ct.table_options.clone())
        .hive_formats(no_hive.filter(|_| ct.hive_formats.is_some()))
        .build();
    let written = sqlparser::ast::Statement::CreateTable(ct.clone());
    if rebuilt == written {
        return Ok(());
    }
    let field = first_differing_field(&format!("{written:#?}"), &format!("{rebuilt:#?}"))
        .unwrap_or_else(|| "an option".into());
    let (clause, keyword) = create_table_clause(&field);
    let keywords: &[Keyword] = if keyword == Keyword::CONSTRAINT {
        &[
            Keyword::CONSTRAINT,
            Keyword::PRIMARY,
            Keyword::UNIQUE,
            Keyword::FOREIGN,
            Keyword::CHECK,
        ]
    } else {
        &[keyword]
    };
    Err(at(
        st.find_any(keywords),
        format!(
            "CREATE TABLE {}: {clause} is not supported (only columns and WITH (...) options)",
            ct.name
        ),
    ))
}

/// The SQL words of a `CreateTable` field, and the keyword to locate it by.
fn create_table_clause(field: &str) -> (String, Keyword) {
    let known: &[(&str, &str, Keyword)] = &[
        ("or_replace", "OR REPLACE", Keyword::REPLACE),
        ("or_alter", "OR ALTER", Keyword::ALTER),
        ("temporary", "TEMPORARY", Keyword::TEMPORARY),
        ("external", "EXTERNAL", Keyword::EXTERNAL),
        ("if_not_exists", "IF NOT EXISTS", Keyword::IF),
        ("constraints", "a table constraint", Keyword::CONSTRAINT),
        ("query", "AS SELECT", Keyword::AS),
        ("like", "LIKE", Keyword::LIKE),
        ("partition_by", "PARTITION BY", Keyword::PARTITION),
        ("cluster_by", "CLUSTER BY", Keyword::CLUSTER),
        ("order_by", "ORDER BY", Keyword::ORDER),
        ("primary_key", "PRIMARY KEY", Keyword::PRIMARY),
        ("comment", "COMMENT", Keyword::COMMENT),
        ("location", "LOCATION", Keyword::LOCATION),
        ("without_rowid", "WITHOUT ROWID", Keyword::WITHOUT),
        ("transient", "TRANSIENT", Keyword::TRANSIENT),
        ("volatile", "VOLATILE", Keyword::VOLATILE),
        ("global", "GLOBAL", Keyword::GLOBAL),
        ("unlogged", "UNLOGGED", Keyword::UNLOGGED),
        ("on_commit", "ON COMMIT", Keyword::ON),
        ("inherits", "INHERITS", Keyword::INHERITS),
        ("hive_distribution", "PARTITIONED BY", Keyword::PARTITIONED),
        ("hive_formats", "STORED AS / ROW FORMAT", Keyword::STORED),
        ("file_format", "STORED AS", Keyword::STORED),
        ("clone", "CLONE", Keyword::CLONE),
        ("strict", "STRICT", Keyword::STRICT),
    ];
    match known.iter().find(|(f, _, _)| *f == field) {
        Some((_, sql, kw)) => (sql.to_string(), *kw),
        None => (
            format!("clause '{}'", field.replace('_', " ").to_uppercase()),
            Keyword::NoKeyword,
        ),
    }
}

/// The name of the first top-level field whose `{:#?}` rendering differs between `a` and
/// `b` (both renderings of one struct type).
fn first_differing_field(a: &str, b: &str) -> Option<String> {
    fn fields(s: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for line in s.lines() {
            // Top-level fields of `Variant(Struct { ... })` sit at depth 2 (8 spaces).
            let depth = line.len() - line.trim_start().len();
            if depth == 8 {
                if let Some((name, _)) = line.trim_start().split_once(':') {
                    out.push((name.to_string(), String::new()));
                }
            }
            if let Some(last) = out.last_mut() {
                last.1.push_str(line);
                last.1.push('\n');
            }
        }
        out
    }
    let (fa, fb) = (fields(a), fields(b));
    fa.iter()
        .zip(fb.iter())
        .find(|(x, y)| x != y)
        .map(|(x, _)| x.0.clone())
}

/// Refuses every clause of `INSERT` but the target table, its column list and the query;
/// then checks the query ([`check_query`]).
pub(crate) fn check_insert(ins: &Insert, st: &StatementTokens) -> Result<(), SqlError> {
    let Insert {
        or,
        ignore,
        into: _, // `INSERT out` and `INSERT INTO out` mean the same
        table,
        table_alias,
        columns: _, // implemented
        overwrite,
        source,
        assignments,
        partitioned,
        after_columns,
        has_table_keyword: _, // `INSERT INTO TABLE out` means `INSERT INTO out`
        on,
        returning,
        replace_into,
        priority,
        insert_alias,
        settings,
        format_clause,
    } = ins;
    let what = format!("INSERT INTO {table}");
    let no = |clause: &str, kw: Keyword| Err(st.refuse(&what, clause, kw, ""));
    if or.is_some() {
        return no("INSERT OR ...", Keyword::OR);
    }
    if *ignore {
        return no("INSERT IGNORE", Keyword::IGNORE);
    }
    if !matches!(table, TableObject::TableName(_)) {
        return no("INSERT INTO FUNCTION", Keyword::FUNCTION);
    }
    if table_alias.is_some() || insert_alias.is_some() {
        return no("an alias of the target table", Keyword::AS);
    }
    if *overwrite {
        return no("INSERT OVERWRITE", Keyword::OVERWRITE);
    }
    if *replace_into {
        return no("REPLACE INTO", Keyword::REPLACE);
    }
    if !assignments.is_empty() {
        return no("INSERT ... SET", Keyword::SET);
    }
    if partitioned.is_some() || !after_columns.is_empty() {
        return no("PARTITION", Keyword::PARTITION);
    }
    match on {
        None => {}
        Some(OnInsert::OnConflict(_)) => return no("ON CONFLICT", Keyword::ON),
        Some(OnInsert::DuplicateKeyUpdate(_)) => return no("ON DUPLICATE KEY UPDATE", Keyword::ON),
        Some(_) => return no("ON ...", Keyword::ON),
    }
    if returning.is_some() {
        return no("RETURNING", Keyword::RETURNING);
    }
    if priority.is_some() {
        return no("an insert priority", Keyword::NoKeyword);
    }
    if settings.is_some() {
        return no("SETTINGS", Keyword::SETTINGS);
    }
    if format_clause.is_some() {
        return no("FORMAT", Keyword::FORMAT);
    }
    let Some(query) = source else {
        return Err(at(st.start(), format!("{what} needs a SELECT")));
    };
    check_query(query, &what, st)
}

/// Refuses every clause of a query but its body: one `SELECT`, or `UNION ALL` of several.
pub(crate) fn check_query(q: &Query, what: &str, st: &StatementTokens) -> Result<(), SqlError> {
    let Query {
        with,
        body,
        order_by,
        limit_clause,
        fetch,
        locks,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = q;
    let no = |clause: &str, kw: Keyword, why: &str| Err(st.refuse(what, clause, kw, why));
    if with.is_some() {
        return no("WITH", Keyword::WITH, NOT_YET);
    }
    if order_by.is_some() {
        return no(
            "ORDER BY",
            Keyword::ORDER,
            ": a stream is written in arrival order",
        );
    }
    match limit_clause {
        None => {}
        Some(LimitClause::LimitOffset {
            limit: None,
            offset: Some(_),
            ..
        }) => return no("OFFSET", Keyword::OFFSET, ""),
        Some(_) => return no("LIMIT", Keyword::LIMIT, ": a stream has no end to count to"),
    }
    if fetch.is_some() {
        return no("FETCH", Keyword::FETCH, "");
    }
    if !locks.is_empty() || for_clause.is_some() {
        return no("FOR ...", Keyword::FOR, "");
    }
    if settings.is_some() {
        return no("SETTINGS", Keyword::SETTINGS, "");
    }
    if format_clause.is_some() {
        return no("FORMAT", Keyword::FORMAT, "");
    }
    if !pipe_operators.is_empty() {
        return no("a pipe operator (|>)", Keyword::NoKeyword, "");
    }
    check_body(body, what, st)
}

fn check_body(body: &SetExpr, what: &str, st: &StatementTokens) -> Result<(), SqlError> {
    let no = |clause: &str, kw: Keyword, why: &str| Err(st.refuse(what, clause, kw, why));
    match body {
        SetExpr::Select(s) => check_select(s, what, st),
        SetExpr::Query(q) => check_query(q, what, st),
        SetExpr::SetOperation {
            op: SetOperator::Union,
            set_quantifier: SetQuantifier::All,
            left,
            right,
        } => {
            check_body(left, what, st)?;
            check_body(right, what, st)
        }
        SetExpr::SetOperation {
            op: SetOperator::Union,
            ..
        } => no(
            "UNION without ALL",
            Keyword::UNION,
            ": it removes duplicates, which needs state; write UNION ALL",
        ),
        SetExpr::SetOperation { op, .. } => {
            let kw = match op {
                SetOperator::Except => Keyword::EXCEPT,
                SetOperator::Intersect => Keyword::INTERSECT,
                SetOperator::Minus => Keyword::MINUS,
                SetOperator::Union => Keyword::UNION,
            };
            no(&op.to_string(), kw, "")
        }
        SetExpr::Values(_) => no("VALUES", Keyword::VALUES, ": SELECT from a source table"),
        SetExpr::Table(_) => no("TABLE", Keyword::TABLE, ": write SELECT * FROM"),
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_) => {
            no("a nested statement", Keyword::NoKeyword, "")
        }
    }
}

/// Refuses every clause of a `SELECT` but its list, one `FROM` table and `WHERE`.
fn check_select(s: &Select, what: &str, st: &StatementTokens) -> Result<(), SqlError> {
    let st = &StatementTokens {
        tokens: st.tokens,
        after: Some(s.select_token.0.span.start),
    };
    let Select {
        select_token: _,
        distinct,
        top,
        top_before_distinct: _, // only with TOP
        projection,
        exclude,
        into,
        from,
        lateral_views,
        prewhere,
        selection: _, // implemented
        // `having`: implemented over a windowed aggregate (`aggregate.rs`).
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having: _,
        named_window,
        qualify,
        window_before_qualify: _, // only with QUALIFY and WINDOW
        value_table_mode,
        connect_by,
        flavor,
    } = s;
    let no = |clause: &str, kw: Keyword, why: &str| Err(st.refuse(what, clause, kw, why));
    match distinct {
        None => {}
        Some(Distinct::Distinct) | Some(Distinct::On(_)) => {
            return no(
                "DISTINCT",
                Keyword::DISTINCT,
                ": removing duplicates needs state",
            )
        }
    }
    if top.is_some() {
        return no("TOP", Keyword::TOP, "");
    }
    if exclude.is_some() {
        return no("EXCLUDE", Keyword::EXCLUDE, "");
    }
    if into.is_some() {
        return no("SELECT INTO", Keyword::INTO, "");
    }
    if !lateral_views.is_empty() {
        return no("LATERAL VIEW", Keyword::LATERAL, "");
    }
    if prewhere.is_some() {
        return no("PREWHERE", Keyword::PREWHERE, "");
    }
    match group_by {
        // Expressions (a window and keys; `aggregate.rs` plans them).
        GroupByExpr::Expressions(_, m) if m.is_empty() => {}
        _ => {
            return no(
                "GROUP BY ALL, ROLLUP, CUBE or GROUPING SETS",
                Keyword::GROUP,
                "",
            )
        }
    }
    if !cluster_by.is_empty() {
        return no("CLUSTER BY", Keyword::CLUSTER, "");
    }
    if !distribute_by.is_empty() {
        return no("DISTRIBUTE BY", Keyword::DISTRIBUTE, "");
    }
    if !sort_by.is_empty() {
        return no("SORT BY", Keyword::SORT, "");
    }
    if !named_window.is_empty() {
        return no("WINDOW", Keyword::WINDOW, "");
    }
    if qualify.is_some() {
        return no("QUALIFY", Keyword::QUALIFY, "");
    }
    if value_table_mode.is_some() {
        return no("SELECT AS STRUCT / AS VALUE", Keyword::AS, "");
    }
    if connect_by.is_some() {
        return no("CONNECT BY", Keyword::CONNECT, "");
    }
    if !matches!(flavor, SelectFlavor::Standard) {
        return no("FROM before SELECT", Keyword::FROM, "");
    }
    for item in projection {
        let options = match item {
            SelectItem::Wildcard(o) | SelectItem::QualifiedWildcard(_, o) => o,
            _ => continue,
        };
        if *options != WildcardAdditionalOptions::default() {
            let WildcardAdditionalOptions {
                wildcard_token: _,
                opt_ilike,
                opt_exclude,
                opt_except,
                opt_replace,
                opt_rename,
            } = options;
            let (clause, kw) = if opt_ilike.is_some() {
                ("* ILIKE", Keyword::ILIKE)
            } else if opt_exclude.is_some() {
                ("* EXCLUDE", Keyword::EXCLUDE)
            } else if opt_except.is_some() {
                ("* EXCEPT", Keyword::EXCEPT)
            } else if opt_replace.is_some() {
                ("* REPLACE", Keyword::REPLACE)
            } else if opt_rename.is_some() {
                ("* RENAME", Keyword::RENAME)
            } else {
                continue;
            };
            return no(clause, kw, "");
        }
    }
    match from.as_slice() {
        [] => {
            return Err(at(
                st.start(),
                format!("{what}: SELECT needs FROM a source table"),
            ))
        }
        [one] => check_from(one, what, st),
        [_, second, ..] => Err(at(
            first_location(&second.relation).unwrap_or_else(|| st.start()),
            format!("{what}: SELECT must read exactly one table (joins are not supported yet)"),
        )),
    }
}

fn first_location(t: &TableFactor) -> Option<Location> {
    use sqlparser::ast::Spanned;
    let s = t.span();
    (s.start.line > 0).then_some(s.start)
}

fn check_from(t: &TableWithJoins, what: &str, st: &StatementTokens) -> Result<(), SqlError> {
    match t.joins.as_slice() {
        [] => {}
        [join] => return check_join(&t.relation, join, what, st),
        [_, third, ..] => {
            return Err(at(
                first_location(&third.relation).unwrap_or_else(|| st.start()),
                format!("{what}: a join of more than two inputs is not supported yet: join two windowed aggregates, or write the first join into a table and join that"),
            ))
        }
    }
    check_factor(&t.relation, what, st)
}

/// `left JOIN right ON ...`: a windowed join of two subqueries (`join.rs` checks they
/// are windowed aggregates of one window), or an inner join of two tables' rows (an
/// updating join, `join_rows.rs`). An outer join of tables' rows, which would have to
/// retract the rows with NULLs it wrote, is refused with the reason.
fn check_join(
    left: &TableFactor,
    join: &sqlparser::ast::Join,
    what: &str,
    st: &StatementTokens,
) -> Result<(), SqlError> {
    use sqlparser::ast::{JoinConstraint, JoinOperator};
    let constraint = match &join.join_operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c) => c,
        other => {
            let name = format!("{other:?}");
            let name = name.split('(').next().unwrap_or("this join").to_uppercase();
            return Err(at(
                st.find(Keyword::JOIN),
                format!("{what}: {name} joins are not supported: write [INNER], LEFT, RIGHT or FULL JOIN ... ON"),
            ));
        }
    };
    let keeps_right = matches!(
        join.join_operator,
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) | JoinOperator::FullOuter(_)
    );
    if keeps_right && matches!(constraint, JoinConstraint::Using(_)) {
        return Err(at(
            st.find(Keyword::USING),
            format!("{what}: USING in a RIGHT or FULL join is not supported: its unqualified columns read the left side, NULL on a row of the right side alone; write ON x.window = y.window AND x.k = y.k and coalesce(x.k, y.k)"),
        ));
    }
    if !matches!(constraint, JoinConstraint::On(_) | JoinConstraint::Using(_)) {
        return Err(at(
            st.find(Keyword::JOIN),
            format!("{what}: a join needs ON (or USING) its keys: e.g. ON a.k = b.k for two tables' rows, ON a.window = b.window AND a.k = b.k for two windowed aggregates"),
        ));
    }
    let inner = matches!(
        join.join_operator,
        JoinOperator::Join(_) | JoinOperator::Inner(_)
    );
    let tables = [left, &join.relation].map(|f| matches!(f, TableFactor::Table { .. }));
    for side in [left, &join.relation] {
        let derived = matches!(side, TableFactor::Derived { .. });
        // Two tables' rows: an updating join, inner only; two windowed aggregates.
        let refusal = match (derived, tables, inner) {
            (true, [false, false], _) | (false, [true, true], true) => None,
            (false, [true, true], false) => Some("an outer join of two tables' rows is not supported: without a window it would write a row with NULLs and retract it when a match arrives, which is not built. Write [INNER] JOIN (an updating join), or join two windowed aggregates with the same window"),
            _ => Some("a join of a table's rows with a subquery is not supported: join two tables' rows (an updating join, [INNER] JOIN ... ON a.k = b.k into a changelog table), or two windowed aggregates with the same window"),
        };
        check_factor(side, what, st)?;
        if let Some(why) = refusal {
            return Err(at(
                first_location(side).unwrap_or_else(|| st.start()),
                format!("{what}: {why}, e.g. FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, k, count(*) AS n FROM a GROUP BY window, k) x JOIN (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, k, sum(v) AS total FROM b GROUP BY window, k) y ON x.window = y.window AND x.k = y.k"),
            ));
        }
    }
    Ok(())
}

fn check_factor(t: &TableFactor, what: &str, st: &StatementTokens) -> Result<(), SqlError> {
    let no = |clause: &str, kw: Keyword, why: &str| Err(st.refuse(what, clause, kw, why));
    match t {
        TableFactor::Table {
            name: _,
            alias,
            args,
            with_hints,
            version,
            with_ordinality,
            partitions,
            json_path,
            sample,
            index_hints,
        } => {
            if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
                return no("column aliases of a table", Keyword::AS, "");
            }
            if args.is_some() {
                return no("a table function", Keyword::NoKeyword, "");
            }
            if !with_hints.is_empty() || !index_hints.is_empty() {
                return no("table hints", Keyword::WITH, "");
            }
            if version.is_some() {
                return no("FOR SYSTEM_TIME / time travel", Keyword::FOR, "");
            }
            if *with_ordinality {
                return no("WITH ORDINALITY", Keyword::ORDINALITY, "");
            }
            if !partitions.is_empty() {
                return no("PARTITION", Keyword::PARTITION, "");
            }
            if json_path.is_some() {
                return no("a JSON path on a table", Keyword::NoKeyword, "");
            }
            if sample.is_some() {
                return no("TABLESAMPLE", Keyword::TABLESAMPLE, "");
            }
            Ok(())
        }
        // A subquery (over a windowed aggregate: `aggregate.rs` says so otherwise).
        TableFactor::Derived {
            lateral: false,
            subquery,
            alias,
        } => {
            if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
                return no("column aliases of a subquery", Keyword::AS, "");
            }
            check_query(subquery, what, st)
        }
        _ => Err(at(
            first_location(t).unwrap_or_else(|| st.start()),
            format!("{what}: FROM must name a source table or a subquery (functions, LATERAL and UNNEST are not supported)"),
        )),
    }
}

/// A possibly qualified name as written, its parts joined by dots.
pub(crate) fn object_name(n: &sqlparser::ast::ObjectName) -> String {
    n.0.iter()
        .map(|p| {
            p.as_ident()
                .map(|i| i.value.clone())
                .unwrap_or_else(|| p.to_string())
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use crate::parse_pipeline;

    const TABLES: &str = "CREATE TABLE src (a BIGINT, b TEXT) WITH ('x' = 'y'); CREATE TABLE src2 (a BIGINT, b TEXT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT, b TEXT) WITH ('x' = 'y');\n";

    /// `statement` on line 2 after three tables is refused, naming `clause` at the first
    /// occurrence of `at` in the statement.
    fn refused(statement: &str, clause: &str, at: &str) {
        let e = parse_pipeline(&format!("{TABLES}{statement}"))
            .unwrap_err()
            .0;
        let col = statement
            .find(at)
            .unwrap_or_else(|| panic!("{at} in {statement}"))
            + 1;
        assert!(e.contains(clause), "{statement}: {e} should name {clause}");
        assert!(
            e.contains(&format!("(line 2, column {col})"))
                || e.contains(&format!("Line: 2, Column: {col}")),
            "{statement}: {e} should point at line 2, column {col}"
        );
    }

    #[test]
    fn every_query_clause_is_implemented_or_refused_with_its_position() {
        let s = "INSERT INTO out SELECT a, b FROM src";
        let cases: &[(&str, &str, &str)] = &[
            (" LIMIT 0", "LIMIT", "LIMIT"),
            (" LIMIT 10 OFFSET 2", "LIMIT", "LIMIT"),
            (" OFFSET 2", "OFFSET", "OFFSET"),
            (" FETCH FIRST 1 ROWS ONLY", "FETCH", "FETCH"),
            (" ORDER BY a", "ORDER BY", "ORDER"),
            // GROUP BY expressions and HAVING are planned as windows (`aggregate.rs`).
            (" GROUP BY ALL", "GROUP BY ALL", "GROUP"),
            (" FOR UPDATE", "FOR", "FOR"),
            (" TABLESAMPLE BERNOULLI (10)", "TABLESAMPLE", "TABLESAMPLE"),
            (" ON CONFLICT DO NOTHING", "ON CONFLICT", "ON"),
            (" RETURNING a", "RETURNING", "RETURNING"),
            (" WINDOW w AS (PARTITION BY a)", "WINDOW", "WINDOW"),
            (" UNION SELECT a, b FROM src2", "UNION without ALL", "UNION"),
            (" INTERSECT SELECT a, b FROM src2", "INTERSECT", "INTERSECT"),
            (" EXCEPT SELECT a, b FROM src2", "EXCEPT", "EXCEPT"),
            (
                " LEFT JOIN src2 ON src.a = src2.a",
                "an outer join of two tables' rows",
                "src ",
            ),
        ];
        for (tail, clause, at) in cases {
            refused(&format!("{s}{tail};"), clause, at);
        }
        let whole: &[(&str, &str, &str)] = &[
            (
                "INSERT INTO out SELECT DISTINCT a, b FROM src;",
                "DISTINCT",
                "DISTINCT",
            ),
            (
                "INSERT INTO out SELECT DISTINCT ON (a) a, b FROM src;",
                "DISTINCT",
                "DISTINCT",
            ),
            (
                "INSERT INTO out WITH x AS (SELECT a, b FROM src) SELECT a, b FROM x;",
                "WITH",
                "WITH",
            ),
            ("INSERT INTO out VALUES (1, 'x');", "VALUES", "VALUES"),
            (
                "INSERT INTO out SELECT a, b INTO t2 FROM src;",
                "SELECT INTO",
                "INTO t2",
            ),
            (
                "INSERT INTO out SELECT a, b FROM LATERAL (SELECT a, b FROM src) s;",
                "FROM must name a source table or a subquery",
                "SELECT a, b FROM src)",
            ),
            (
                "INSERT INTO out SELECT a, b FROM src, src2;",
                "exactly one table",
                "src2",
            ),
            ("INSERT INTO out TABLE src;", "TABLE", "TABLE"),
            ("INSERT INTO out AS o SELECT a, b FROM src;", "AS", "AS"),
            ("DELETE FROM src;", "unsupported statement", "DELETE"),
            ("SELECT a FROM src;", "unsupported statement", "SELECT"),
            ("DROP TABLE src;", "unsupported statement", "DROP"),
            ("UPDATE src SET a = 1;", "unsupported statement", "UPDATE"),
        ];
        for (statement, clause, at) in whole {
            refused(statement, clause, at);
        }
    }

    #[test]
    fn every_create_table_clause_is_implemented_or_refused_with_its_position() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "CREATE TABLE IF NOT EXISTS t (a BIGINT) WITH ('x' = 'y');",
                "IF NOT EXISTS",
                "IF",
            ),
            (
                "CREATE TEMPORARY TABLE t (a BIGINT) WITH ('x' = 'y');",
                "TEMPORARY",
                "TEMPORARY",
            ),
            (
                "CREATE OR REPLACE TABLE t (a BIGINT) WITH ('x' = 'y');",
                "OR REPLACE",
                "REPLACE",
            ),
            (
                "CREATE TABLE t (a BIGINT, UNIQUE (a)) WITH ('x' = 'y');",
                "table constraint",
                "UNIQUE",
            ),
            (
                "CREATE TABLE t (a BIGINT) PARTITION BY RANGE (a);",
                "PARTITION",
                "PARTITION",
            ),
            ("CREATE TABLE t AS SELECT a FROM src;", "AS SELECT", "AS"),
            (
                "CREATE TABLE t (a BIGINT) INHERITS (src);",
                "INHERITS",
                "INHERITS",
            ),
        ];
        for (statement, clause, at) in cases {
            refused(statement, clause, at);
        }
        for (ty, why) in [
            ("BIGINT(5)", "display width"),
            ("INT(11)", "display width"),
            ("DOUBLE(10, 2)", "precision"),
            ("FLOAT(24)", "precision"),
            ("BIGINT CONSTRAINT c NOT NULL", "CONSTRAINT c"),
            ("BIGINT NULL NOT NULL", "both NULL and NOT NULL"),
        ] {
            let e = parse_pipeline(&format!("CREATE TABLE t (a {ty}) WITH ('x' = 'y')"))
                .unwrap_err()
                .0;
            assert!(e.contains("column 'a'") && e.contains(why), "{ty}: {e}");
        }
    }

    #[test]
    fn implemented_forms_parse() {
        for statement in [
            "INSERT INTO out SELECT a, b FROM src;",
            "INSERT INTO out SELECT * FROM src;",
            "INSERT INTO out (b, a) SELECT b, a FROM src;",
            "INSERT out SELECT a, b FROM src;",
            "INSERT INTO out (SELECT a, b FROM src);",
            "INSERT INTO out SELECT a, b FROM src s;",
        ] {
            let p = parse_pipeline(&format!("{TABLES}{statement}"))
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
            assert_eq!(p.inserts.len(), 1, "{statement}");
        }
        let p = parse_pipeline(&format!(
            "{TABLES}INSERT INTO out SELECT a, b FROM src UNION ALL SELECT a, b FROM src2 UNION ALL (SELECT a, b FROM src);"
        ))
        .unwrap();
        let sources: Vec<&str> = p.inserts.iter().map(|i| i.source.as_str()).collect();
        assert_eq!(sources, ["src", "src2", "src"]);
        assert!(p.inserts.iter().all(|i| i.sink == "out"));
    }
}
