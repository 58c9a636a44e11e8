//! Arbitrary method token and path bytes through the route matchers: no panic, and every
//! match is consistent with the route's declared method, template and the 405 `Allow` set.
//!
//! Input layout: `<method token> <path bytes>`; without a space the whole input is the path
//! and the method is GET.

use http::Method;
use tollgate::http::route::{
    allowed_methods, match_metrics_route, match_route, path_param, path_tail, Route, RouteMatch,
};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let (method, path) = match data.iter().position(|&b| b == b' ') {
        Some(space) => (
            Method::from_bytes(&data[..space]).unwrap_or(Method::GET),
            &data[space + 1..],
        ),
        None => (Method::GET, data),
    };
    let path = String::from_utf8_lossy(path);
    let path: &str = &path;

    let first = match_route(&method, path);
    assert_eq!(
        first,
        match_route(&method, path),
        "matching is deterministic"
    );
    match first {
        RouteMatch::Found(route) => {
            assert_ne!(
                route,
                Route::Metrics,
                "/metrics is not on the main listener"
            );
            assert!(Route::ALL.contains(&route));
            let declared = route.method();
            assert!(
                declared == method || (method == Method::HEAD && declared == Method::GET),
                "{method} matched a {declared} route"
            );
            assert_eq!(match_route(&declared, path), RouteMatch::Found(route));
            let template = route.template();
            if !template.contains('{') {
                assert_eq!(template, path, "fixed templates match only themselves");
            } else {
                // Same number of segments, and the fixed ones equal (except a `{path}` tail).
                let mut got = path[1..].split('/');
                for want in template[1..].split('/') {
                    if want == "{path}" {
                        assert!(got.next().is_some_and(|s| !s.is_empty()));
                        assert!(got.all(|s| !s.is_empty()));
                        break;
                    }
                    let seg = got.next().unwrap_or_default();
                    assert!(!seg.is_empty(), "empty segment in {path}");
                    if !want.starts_with('{') {
                        assert_eq!(want, seg, "{path} vs {template}");
                    }
                }
                assert_eq!(got.next(), None, "{path} longer than {template}");
            }
            assert!(allowed_methods(path).is_some());
            let _ = (
                route.group(),
                route.endpoint().as_str(),
                route.upstream_path(),
            );
        }
        RouteMatch::MethodNotAllowed => {
            let allow = allowed_methods(path).unwrap_or_default();
            assert!(!allow.is_empty());
            assert!(!allow.split(", ").any(|m| m == method.as_str()));
        }
        RouteMatch::NotFound => assert_eq!(allowed_methods(path), None),
    }

    let metrics = match_metrics_route(&method, path);
    assert_eq!(metrics != RouteMatch::NotFound, path == "/metrics");

    for index in 0..4 {
        if let Some(segment) = path_param(path, index) {
            assert!(!segment.is_empty() && !segment.contains('/'));
        }
        if let Some(rest) = path_tail(path, index) {
            assert!(path.ends_with(rest));
        }
    }
}
