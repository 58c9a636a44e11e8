//! SGLang native `/generate`.
//!
//! Streaming sends the cumulative text so far in every event; the event of
//! the last token carries the finish reason, then `data: [DONE]`.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{text_of, Completion, Finish};
use crate::sse;

fn finish_reason(c: &Completion) -> Value {
    match c.finish {
        Finish::Length => json!({"type": "length", "length": c.completion_tokens}),
        Finish::Stop => json!({"type": "stop", "matched": null}),
    }
}

/// The body after `generated` tokens; finished ones carry the reason.
fn state(c: &Completion, generated: u64) -> Value {
    let finished = generated == c.completion_tokens;
    json!({
        "text": text_of(generated),
        "meta_info": {
            "id": c.id,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": generated,
            "cached_tokens": c.cached_tokens,
            "finish_reason": if finished { finish_reason(c) } else { Value::Null },
        },
    })
}

pub fn response(c: &Completion) -> Value {
    state(c, c.completion_tokens)
}

pub fn token_event(c: &Completion, i: u64) -> Bytes {
    sse::data(&state(c, i + 1))
}

pub fn end_events(c: &Completion) -> Vec<Bytes> {
    let mut events = Vec::with_capacity(2);
    if c.completion_tokens == 0 {
        // No token event carried the finish reason.
        events.push(sse::data(&state(c, 0)));
    }
    events.push(sse::done());
    events
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{completion, data_of};
    use super::super::Finish;
    use crate::prompt::Api;

    #[test]
    fn non_stream_shape() {
        let v = completion(Api::Generate, 2).response();
        assert_eq!(v["text"], "tok0 tok1 ");
        assert_eq!(v["meta_info"]["id"], "abc");
        assert_eq!(v["meta_info"]["prompt_tokens"], 10);
        assert_eq!(v["meta_info"]["completion_tokens"], 2);
        assert_eq!(v["meta_info"]["cached_tokens"], 4);
        assert_eq!(v["meta_info"]["finish_reason"]["type"], "length");
    }

    #[test]
    fn stream_is_cumulative() {
        let events = completion(Api::Generate, 2).stream_all();
        assert_eq!(events.len(), 3);
        let first = data_of(&events[0]);
        assert_eq!(first["text"], "tok0 ");
        assert!(first["meta_info"]["finish_reason"].is_null());
        let last = data_of(&events[1]);
        assert_eq!(last["text"], "tok0 tok1 ");
        assert_eq!(last["meta_info"]["completion_tokens"], 2);
        assert_eq!(last["meta_info"]["finish_reason"]["length"], 2);
        assert_eq!(events[2], "data: [DONE]\n\n");
    }

    #[test]
    fn zero_tokens_still_finishes() {
        let mut c = completion(Api::Generate, 0);
        c.finish = Finish::Stop;
        let events = c.stream_all();
        assert_eq!(events.len(), 2);
        assert_eq!(
            data_of(&events[0])["meta_info"]["finish_reason"]["type"],
            "stop"
        );
    }
}
