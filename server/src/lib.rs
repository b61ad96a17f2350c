//! `pubsub-connector serve`: the connection wizard (static page) and the REST API it calls,
//! mirroring Arroyo's connection API (SPEC 7; reference: docs/rest-api.md). Profiles and
//! tables persist in SQLite under the data directory.

mod assets;
pub mod columns;
mod derive;
pub mod error;
pub mod guard;
mod pipelines;
mod profiles;
mod redact;
pub mod sql;
pub mod store;
mod table_test;
mod tables;
pub mod validate;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::routing::{delete, get, post};
use axum::Router;

use crate::guard::Access;
use crate::store::Store;
use crate::validate::Validators;

/// The connector id every body names (`"connector": "pubsub"`).
pub const CONNECTOR: &str = "pubsub";

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    pub validators: Arc<Validators>,
    /// Permits for table tests running at once ([`table_test::MAX_RUNNING`]).
    pub table_tests: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    /// Opens (creating) the store under `data_dir`.
    pub fn open(data_dir: &Path) -> anyhow::Result<AppState> {
        Ok(AppState {
            store: Arc::new(Store::open(data_dir)?),
            validators: Arc::new(Validators::new()),
            table_tests: Arc::new(tokio::sync::Semaphore::new(table_test::MAX_RUNNING)),
        })
    }
}

/// The API under `/v1` and the wizard at `/`, every request first checked by
/// [`guard::check`] against `access`.
pub fn router(state: AppState, access: Access) -> Router {
    Router::new()
        .route("/v1/connectors", get(profiles::connectors))
        .route("/v1/connection_profiles/test", post(profiles::test))
        .route(
            "/v1/connection_profiles",
            post(profiles::create).get(profiles::list),
        )
        .route("/v1/connection_profiles/{id}", delete(profiles::remove))
        .route(
            "/v1/connection_profiles/{id}/autocomplete",
            get(profiles::autocomplete),
        )
        .route("/v1/connection_tables/test", post(table_test::test))
        .route("/v1/connection_tables/schema", post(derive::columns))
        .route(
            "/v1/connection_tables",
            post(tables::create).get(tables::list),
        )
        .route("/v1/connection_tables/{id}", delete(tables::remove))
        .route("/v1/pipelines/validate", post(pipelines::validate))
        .route("/", get(assets::index))
        .route("/assets/{*path}", get(assets::asset))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(access),
            guard::check,
        ))
}

/// Serves until `shutdown` resolves, answering only requests `access` lets through.
/// Errors if the store cannot be opened.
pub async fn serve(
    listener: tokio::net::TcpListener,
    data_dir: PathBuf,
    access: Access,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = AppState::open(&data_dir)?;
    axum::serve(listener, router(state, access))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

thread_local! {
    /// The store `'connection-profile' = 'name'` resolves against while this server plans
    /// a pipeline on this thread ([`with_profiles_of`]): its own, whatever directory the
    /// process-wide resolver was made for.
    static PLANNING_STORE: std::cell::RefCell<Option<Arc<Store>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (synchronous planning) with `'connection-profile' = 'name'` resolved against
/// `store`, as `run --data-dir` resolves it against the same directory. Installs the
/// process-wide resolver first when none is (it answers only inside this call); a
/// resolver installed before that is not [`profile_resolver`]'s would ignore `store`.
pub(crate) fn with_profiles_of<R>(store: &Arc<Store>, f: impl FnOnce() -> R) -> R {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        pubsub_table_options::set_profile_resolver(Box::new(|name: &str| {
            match PLANNING_STORE.with(|s| s.borrow().clone()) {
                Some(store) => saved_profile(&store, name),
                None => Err("saved connection profiles are not available here".into()),
            }
        }))
    });
    struct Reset(Option<Arc<Store>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            PLANNING_STORE.with(|s| *s.borrow_mut() = self.0.take());
        }
    }
    let _reset = Reset(PLANNING_STORE.with(|s| s.borrow_mut().replace(store.clone())));
    f()
}

/// The profile saved as `name` in `store`, for the resolver.
fn saved_profile(store: &Store, name: &str) -> Result<pubsub_schema::PubSubProfile, String> {
    let record = store.profile_named(name).map_err(|_| {
        "no saved connection profile of that name on this server (save it in the wizard, or see GET /v1/connection_profiles)".to_string()
    })?;
    serde_json::from_value(record.config)
        .map_err(|e| format!("the saved profile cannot be read: {e}"))
}

/// Resolves `'connection-profile' = 'name'` from the store under `data_dir`, for `run`.
/// The store is opened at each lookup (a table or two per pipeline), so a pipeline
/// without saved profiles never touches the directory. While this server plans a
/// pipeline ([`with_profiles_of`]), its own store answers instead.
pub fn profile_resolver(data_dir: PathBuf) -> Box<pubsub_table_options::ProfileResolver> {
    Box::new(move |name: &str| {
        if let Some(store) = PLANNING_STORE.with(|s| s.borrow().clone()) {
            return saved_profile(&store, name);
        }
        // A lookup reads; it never creates the directory or the file.
        if !data_dir.join(store::FILE).is_file() {
            return Err(format!(
                "no saved connection profiles in {} (save one with `pubsub-connector serve --data-dir {}`, or pass run --data-dir)",
                data_dir.display(),
                data_dir.display()
            ));
        }
        let store = Store::open(&data_dir).map_err(|e| e.to_string())?;
        let record = store.profile_named(name).map_err(|_| {
            format!(
                "no saved connection profile of that name in {} (save it with `pubsub-connector serve --data-dir {}`)",
                data_dir.display(),
                data_dir.display()
            )
        })?;
        serde_json::from_value(record.config)
            .map_err(|e| format!("the saved profile cannot be read: {e}"))
    })
}

/// The default data directory: `$XDG_DATA_HOME/pubsub-connector`, else
/// `$HOME/.local/share/pubsub-connector`, else `./pubsub-connector-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("pubsub-connector");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/pubsub-connector");
    }
    PathBuf::from("pubsub-connector-data")
}
