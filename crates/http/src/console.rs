//! The web console: the page at `/` and its assets under `/console/`, embedded in the binary
//! from `crates/http/console/` (built from `web/` by `npm run build`, committed), so a node
//! serves it with no files beside it and nothing fetched from elsewhere.
//!
//! Every answer carries a strong ETag (a hash of the embedded bytes: it changes only with the
//! binary), is revalidated before reuse, and a Content-Security-Policy that lets the page load
//! and call only this origin.

use std::sync::OnceLock;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Scripts, styles and requests from this origin only; no plugins, frames or inline script.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: OnceLock<String>,
}

static INDEX: Asset = Asset {
    body: include_bytes!("../console/index.html"),
    content_type: "text/html; charset=utf-8",
    etag: OnceLock::new(),
};
static APP: Asset = Asset {
    body: include_bytes!("../console/app.js"),
    content_type: "text/javascript; charset=utf-8",
    etag: OnceLock::new(),
};
static STYLE: Asset = Asset {
    body: include_bytes!("../console/style.css"),
    content_type: "text/css; charset=utf-8",
    etag: OnceLock::new(),
};

/// The console's routes, for any router state.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|h: HeaderMap| async move { serve(&INDEX, &h) }))
        .route(
            "/console/app.js",
            get(|h: HeaderMap| async move { serve(&APP, &h) }),
        )
        .route(
            "/console/style.css",
            get(|h: HeaderMap| async move { serve(&STYLE, &h) }),
        )
}

fn serve(asset: &'static Asset, request: &HeaderMap) -> Response {
    let etag = etag(asset);
    let matches = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let headers = [
        (header::ETAG, HeaderValue::from_str(etag).ok()),
        (
            header::CACHE_CONTROL,
            Some(HeaderValue::from_static("no-cache")),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            Some(HeaderValue::from_static(CONTENT_SECURITY_POLICY)),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            Some(HeaderValue::from_static("nosniff")),
        ),
        (
            header::REFERRER_POLICY,
            Some(HeaderValue::from_static("no-referrer")),
        ),
    ];
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    for (name, value) in headers {
        if let Some(value) = value {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// `"<64-bit FNV-1a of the bytes>"`, computed once per asset.
fn etag(asset: &'static Asset) -> &'static str {
    asset.etag.get_or_init(|| {
        let hash = asset.body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("\"{hash:016x}\"")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_page_loads_only_the_embedded_assets() {
        let page = std::str::from_utf8(INDEX.body).expect("index.html is UTF-8");
        assert!(page.contains("src=\"/console/app.js\""));
        assert!(page.contains("href=\"/console/style.css\""));
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(!APP.body.is_empty() && !STYLE.body.is_empty());
    }

    #[test]
    fn etags_differ_by_asset_and_a_matching_one_gets_304() {
        assert_ne!(etag(&INDEX), etag(&APP));
        let mut request = HeaderMap::new();
        request.insert(header::IF_NONE_MATCH, HeaderValue::from_static(etag(&APP)));
        assert_eq!(serve(&APP, &request).status(), StatusCode::NOT_MODIFIED);
        let fresh = serve(&APP, &HeaderMap::new());
        assert_eq!(fresh.status(), StatusCode::OK);
        assert_eq!(
            fresh.headers()[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
    }
}
