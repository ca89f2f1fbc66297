//! Signing in a browser to the review pages.
//!
//! A browser cannot send an `Authorization` header when a person follows a
//! link, so the review routes (`/runs/…`, never `/mcp`) also take the same
//! bearer token from a cookie: `GET /login` is a form for the token, `POST
//! /login` checks it exactly as the bearer layer does and, when accepted,
//! sets `aci_review` (`HttpOnly`, `SameSite=Strict`, `Path=/runs`, eight
//! hours, `Secure` when the configured resource URL is `https`) and sends
//! the browser on to the page it came for. The token itself is the cookie's
//! value, so every replica accepts it and a revoked token or an expired JWT
//! stops working at once; it is never put in a URL. `POST /logout` clears
//! the cookie. A page asked for without credentials is a redirect to the
//! form when the request is a browser's navigation (`Accept: text/html`),
//! and 401 with the bearer challenge otherwise.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};

use super::auth::AuthLayerState;

/// The cookie that carries the review token.
pub(crate) const COOKIE: &str = "aci_review";

/// How long the cookie lives, in seconds.
const MAX_AGE_SECS: u64 = 8 * 3600;

/// Largest login form read.
pub(crate) const MAX_FORM_BYTES: usize = 16 * 1024;

/// `GET /login`, `POST /login`, `POST /logout`.
pub(crate) fn routes(auth: Arc<AuthLayerState>) -> Router {
    Router::new()
        .route("/login", get(form).post(login))
        .route("/logout", post(logout))
        .with_state(auth)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            MAX_FORM_BYTES,
        ))
        .layer(axum::middleware::map_response(private))
}

async fn private(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ),
    );
    response
}

/// `next` when it is a review page of this server (`/runs/…`), else `/`:
/// the form never sends a browser elsewhere.
fn safe_next(next: Option<&str>) -> Option<&str> {
    next.filter(|n| {
        n.starts_with("/runs/")
            && !n.contains("//")
            && !n.contains('\\')
            && n.bytes().all(|b| b.is_ascii_graphic())
    })
}

async fn form(uri: Uri) -> Response {
    let next = uri.query().and_then(|q| form_field(q.as_bytes(), "next"));
    page(safe_next(next.as_deref()), None).into_response()
}

fn page(
    next: Option<&str>,
    problem: Option<&str>,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], String) {
    let markup: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Sign in · aci review" }
                style { "body{font:15px/1.45 system-ui,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem}label,input,button{display:block;width:100%;font:inherit}input{margin:.3rem 0 .8rem;padding:.4rem}button{padding:.4rem}.problem{color:#c62828}" }
            }
            body {
                h1 { "Sign in to review runs" }
                @if let Some(problem) = problem {
                    p.problem role="alert" { (problem) }
                }
                form method="post" action="/login" {
                    label for="token" { "Your aci token (the bearer token your agent or you were given)" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    @if let Some(next) = next {
                        input type="hidden" name="next" value=(next);
                    }
                    button type="submit" { "Sign in" }
                }
            }
        }
    };
    let status = if problem.is_some() {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
}

fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// Whether cookies should be `Secure`: the configured resource is https.
fn secure(state: &AuthLayerState) -> bool {
    state
        .resource
        .as_deref()
        .is_some_and(|r| r.starts_with("https://"))
}

async fn login(State(state): State<Arc<AuthLayerState>>, body: Bytes) -> Response {
    let next = form_field(&body, "next");
    let next = safe_next(next.as_deref());
    let token = form_field(&body, "token").unwrap_or_default();
    let Some(authenticator) = &state.authenticator else {
        // An open server needs no sign-in.
        return Redirect::to(next.unwrap_or("/login")).into_response();
    };
    if token.is_empty() || authenticator.authenticate_token(token.trim()).is_err() {
        state.metrics.unauthorized();
        return page(next, Some("That token was not accepted.")).into_response();
    }
    let value: String = form_urlencoded::byte_serialize(token.trim().as_bytes()).collect();
    let cookie = format!(
        "{COOKIE}={value}; Path=/runs; Max-Age={MAX_AGE_SECS}; HttpOnly; SameSite=Strict{}",
        if secure(&state) { "; Secure" } else { "" }
    );
    let mut response = match next {
        Some(next) => Redirect::to(next).into_response(),
        None => (StatusCode::OK, "signed in; open /runs/<run_id>\n").into_response(),
    };
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn logout(State(state): State<Arc<AuthLayerState>>) -> Response {
    let cookie = format!(
        "{COOKIE}=; Path=/runs; Max-Age=0; HttpOnly; SameSite=Strict{}",
        if secure(&state) { "; Secure" } else { "" }
    );
    let mut response = Redirect::to("/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// The review token of a request's `aci_review` cookie, if it has one.
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| {
            let text = format!("t={value}");
            form_urlencoded::parse(text.as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
        })
        .filter(|token| !token.is_empty())
}

/// Whether a request is a browser's page navigation (it would rather see
/// the sign-in form than a 401).
pub(crate) fn is_navigation(method: &axum::http::Method, headers: &HeaderMap) -> bool {
    method == axum::http::Method::GET
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"))
}

/// Where a navigation without credentials is sent: the form, with the page
/// it asked for as `next`.
pub(crate) fn to_login(path_and_query: &str) -> Response {
    let next: String = form_urlencoded::byte_serialize(path_and_query.as_bytes()).collect();
    Redirect::to(&format!("/login?next={next}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_review_pages() {
        assert_eq!(safe_next(Some("/runs/r1")), Some("/runs/r1"));
        for bad in [
            "https://evil.test/runs/x",
            "//evil.test/runs/x",
            "/runs//evil.test",
            "/login",
            "/runs/a b",
            "/runs/\\evil",
        ] {
            assert_eq!(safe_next(Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn the_cookie_is_read_back() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("other=1; aci_review=a%2Bb%3Dc; x=y"),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some("a+b=c"));
        headers.insert(header::COOKIE, HeaderValue::from_static("aci_review="));
        assert_eq!(cookie_token(&headers), None);
    }
}
