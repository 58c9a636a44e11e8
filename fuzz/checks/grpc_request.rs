//! Arbitrary bodies through the gRPC pipeline's request reader (`Ask::parse`) on each of its
//! routes (the first byte picks the route): no panic; a body it accepts stays within every
//! bound the engines rely on (`n`, stop strings, stop ids, logprobs, the sampling ranges
//! OpenAI documents), and the engine's parameters carry the same values.

use tollgate::chat::stops::{MAX_STOPS, MAX_STOP_BYTES};
use tollgate::generation::ask::{
    Api, Ask, Input, MAX_CHAT_TOP_LOGPROBS, MAX_CHOICES, MAX_STOP_TOKEN_IDS,
};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let route = match first % 3 {
        0 => Api::Chat,
        1 => Api::Completions,
        _ => Api::Generate,
    };
    let Ok(ask) = Ask::parse(route, body) else {
        return;
    };
    assert_eq!(ask.route, route);
    assert!((1..=MAX_CHOICES).contains(&ask.n), "n = {}", ask.n);
    assert!(ask.stops.len() <= MAX_STOPS, "{} stops", ask.stops.len());
    assert!(ask
        .stops
        .iter()
        .all(|s| !s.is_empty() && s.len() <= MAX_STOP_BYTES));
    assert!(ask.stop_token_ids.len() <= MAX_STOP_TOKEN_IDS);
    if let Some(k) = ask.logprobs {
        assert!(k <= MAX_CHAT_TOP_LOGPROBS, "logprobs {k}");
    }
    let s = ask.sampling;
    assert!((0.0..=2.0).contains(&s.temperature), "{s:?}");
    assert!(s.top_p > 0.0 && s.top_p <= 1.0, "{s:?}");
    assert!(s.top_k == -1 || s.top_k > 0, "{s:?}");
    assert!((0.0..=1.0).contains(&s.min_p), "{s:?}");
    assert!((-2.0..=2.0).contains(&s.frequency_penalty), "{s:?}");
    assert!((-2.0..=2.0).contains(&s.presence_penalty), "{s:?}");
    assert!(
        s.repetition_penalty > 0.0 && s.repetition_penalty <= 2.0,
        "{s:?}"
    );
    match (&ask.input, route) {
        (Input::Chat { .. }, Api::Chat) | (Input::Text(_) | Input::Ids(_), _) => {}
        (Input::Chat { .. }, other) => panic!("a chat input on {other:?}"),
    }
    let params = ask.sampling_params();
    assert_eq!(params.sampling, ask.sampling);
    assert_eq!(params.max_tokens, ask.max_tokens);
    assert_eq!(params.stop_token_ids, ask.stop_token_ids);
    assert_eq!(params.n, ask.n);
    assert_eq!(params.logprobs, ask.logprobs);
}
