//! What DataFusion's SQL planner may resolve names against: the pipeline's source tables
//! and the scalar functions of `datafusion-functions` plus the JSON getters (SPEC 8). Aggregate and window
//! functions are not offered: a stateless operator cannot compute them.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{plan_err, Result, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{AggregateUDF, ScalarUDF, TableSource, WindowUDF};

/// A source table as the planner sees it: its columns only. Filters are not pushed into
/// it (the trait's default, `Unsupported`), so every `WHERE` stays a `Filter` node.
#[derive(Debug)]
struct SourceTable(SchemaRef);

impl TableSource for SourceTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.0.clone()
    }
}

/// Tables and functions for [`datafusion_sql::planner::SqlToRel`].
pub(crate) struct Catalog {
    tables: HashMap<String, Arc<dyn TableSource>>,
    /// By lower-case name and alias: SQL function names are case-insensitive.
    functions: HashMap<String, Arc<ScalarUDF>>,
    /// Empty unless [`with_windows`](Self::with_windows): by lower-case name and alias.
    aggregates: HashMap<String, Arc<AggregateUDF>>,
    /// Empty unless [`with_windows`](Self::with_windows): DataFusion's window functions
    /// (`row_number`, `rank`, `lag`, ...), by lower-case name and alias.
    windows: HashMap<String, Arc<WindowUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
    options: ConfigOptions,
}

impl Catalog {
    /// `tables`: (name, Arrow schema) of each table a query may read.
    pub fn new(tables: impl IntoIterator<Item = (String, SchemaRef)>) -> Self {
        let mut functions = HashMap::new();
        for f in datafusion_functions::all_default_functions()
            .into_iter()
            .chain(pubsub_engine_plan::json::functions())
        {
            for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
                functions.insert(name.to_lowercase(), f.clone());
            }
        }
        let mut options = ConfigOptions::new();
        // Column names match JSON keys exactly, as the DDL declares them (SPEC 8).
        options.sql_parser.enable_ident_normalization = false;
        // Rows carry Utf8; Utf8View would need a cast before every sink.
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.collect_spans = true;
        Catalog {
            tables: tables
                .into_iter()
                .map(|(n, s)| (n, Arc::new(SourceTable(s)) as Arc<dyn TableSource>))
                .collect(),
            functions,
            aggregates: HashMap::new(),
            windows: HashMap::new(),
            planners: vec![
                Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
                Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
                Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            ],
            options,
        }
    }

    /// Offers the window functions (`TUMBLE`, `HOP`, `SESSION`), DataFusion's aggregate
    /// functions and its window functions (`OVER`), for a windowed aggregate
    /// (`aggregate.rs`, `ranking.rs`).
    pub fn with_windows(mut self) -> Self {
        for f in super::window_fns::functions() {
            self.functions.insert(f.name().to_string(), f);
        }
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
                self.aggregates.insert(name.to_lowercase(), f.clone());
            }
        }
        for f in datafusion_functions_window::all_default_window_functions() {
            for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
                self.windows.insert(name.to_lowercase(), f.clone());
            }
        }
        self
    }

    /// Every function name a query may call, for did-you-mean hints.
    pub fn function_names(&self) -> Vec<String> {
        self.functions.keys().cloned().collect()
    }
}

impl ContextProvider for Catalog {
    fn get_table_source(&self, name: TableReference) -> Result<Arc<dyn TableSource>> {
        match self.tables.get(name.table()) {
            Some(t) => Ok(t.clone()),
            None => plan_err!(
                "table '{}' is not defined (CREATE TABLE it first)",
                name.table()
            ),
        }
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.functions.get(&name.to_lowercase()).cloned()
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.aggregates.get(&name.to_lowercase()).cloned()
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.windows.get(&name.to_lowercase()).cloned()
    }

    fn get_variable_type(&self, _names: &[String]) -> Option<DataType> {
        None
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.planners
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.function_names()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.aggregates.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.windows.keys().cloned().collect()
    }
}
