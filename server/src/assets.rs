//! The wizard's static files, compiled into the binary from `server/assets/` (no network
//! at run time).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

#[derive(rust_embed::RustEmbed)]
#[folder = "assets/"]
struct Assets;

fn file(path: &str) -> Response {
    match Assets::get(path) {
        Some(f) => (
            [(header::CONTENT_TYPE, f.metadata.mimetype().to_string())],
            f.data.into_owned(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("no asset '{path}'")).into_response(),
    }
}

pub async fn index() -> Response {
    file("index.html")
}

pub async fn asset(Path(path): Path<String>) -> Response {
    file(&path)
}
