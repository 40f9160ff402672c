//! The page's static files, built into the binary: one stylesheet and one small script
//! module (the CSP forbids inline script and style, so both are files of this origin).

use axum::http::header;
use axum::response::IntoResponse;

pub async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("static/web.css"),
    )
}

pub async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("static/web.js"),
    )
}
