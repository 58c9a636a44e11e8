//! `n` > 1 and log probabilities on the gRPC path, black box, on every service the bundled
//! `grpc-engine` speaks (mock mode; MLX's takes no `n`, so it is in the scoring tests only). The mock's
//! sequence `i` echoes the prompt rotated by `i`; asked for scores, the `k`-th token of a
//! sequence scores `-0.1 * k` and its alternatives are the token itself, then the next ids
//! up, `j` below it scoring `-0.1 * k - j` (see `perf/grpc_engine/mock.rs`). So every
//! choice, text and score here is computed from the test's own tokenizer.

use crate::common;
use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::tokenizer::write_tokenizer;
use common::{post_json, Proc};
use serde_json::{json, Value};
use support::echo::{chat_prompt, gateway_for};
use support::{read_frames, start_json};
use tokenizers::Tokenizer;

/// The services that generate several sequences per request.
const SERVICES: [&str; 4] = ["sglang", "vllm", "trtllm", "tokenspeed"];

/// The services that score tokens: all of them.
const SCORING: [&str; 5] = ["sglang", "vllm", "trtllm", "tokenspeed", "mlx"];

fn temp_dir(service: &str, name: &str) -> PathBuf {
    support::echo::temp_dir("choices", &format!("{service}-{name}"))
}

/// The mock engine speaking `service`, serving `echo-model`.
fn engine(service: &str, args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--service", service, "--model", "echo-model"], args].concat())
}

/// A gateway in front of a fresh engine of `service`, and the test tokenizer.
async fn setup(service: &str, name: &str, args: &[&str]) -> (Proc, Proc, Tokenizer) {
    let dir = temp_dir(service, name);
    let tok = write_tokenizer(&dir);
    let e = engine(service, args);
    let gw = gateway_for(&e, &dir).await;
    (e, gw, tok)
}

/// What the mock's sequence `index` generates for `prompt`: the prompt rotated by
/// `index`, cycling, `max` ids.
fn rotated(prompt: &[u32], index: usize, max: usize) -> Vec<u32> {
    prompt
        .iter()
        .cycle()
        .skip(index % prompt.len())
        .take(max)
        .copied()
        .collect()
}

/// The events of an SSE body, `[DONE]` left out (and checked to be last).
async fn stream(gw: &Proc, path: &str, body: &Value) -> Vec<Value> {
    let c = common::client(false);
    let resp = start_json(&c, &format!("{}{path}", gw.url()), body).await;
    assert_eq!(resp.status(), 200);
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let sse = frames.text();
    assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    sse.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// Per choice index: the streamed text and the finish reason.
fn by_choice(events: &[Value]) -> BTreeMap<u64, (String, Option<String>)> {
    let mut choices: BTreeMap<u64, (String, Option<String>)> = BTreeMap::new();
    for e in events {
        for c in e["choices"].as_array().unwrap() {
            let entry = choices.entry(c["index"].as_u64().unwrap()).or_default();
            assert!(
                entry.1.is_none(),
                "choice {} went on after its end",
                c["index"]
            );
            let piece = c["delta"]["content"].as_str().or(c["text"].as_str());
            entry.0.push_str(piece.unwrap_or(""));
            entry.1 = c["finish_reason"].as_str().map(str::to_owned);
        }
    }
    choices
}

/// A token's own bytes in the test tokenizer (ids below 256 are the byte of that value).
fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    match u8::try_from(id) {
        Ok(byte) => vec![byte],
        Err(_) => tok.decode(&[id], false).unwrap_or_default().into_bytes(),
    }
}

fn spelled(tok: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(&token_bytes(tok, id)).into_owned()
}

/// The mock's score of the `k`-th token (from 1) and of its `j`-th alternative.
fn score(k: usize, j: u32) -> f32 {
    -0.1 * k as f32 - j as f32
}

fn as_f32(v: &Value) -> f32 {
    v.as_f64().unwrap_or_else(|| panic!("{v}")) as f32
}

#[tokio::test]
async fn n_choices_streamed_and_not_on_every_service() {
    for service in SERVICES {
        let (_e, gw, tok) = setup(service, "n", &["--itl-ms", "1"]).await;
        let prompt = "hello world, héllo";
        let ids = tok.encode(prompt, true).unwrap().get_ids().to_vec();
        let expected: Vec<String> = (0..3)
            .map(|i| tok.decode(&rotated(&ids, i, 6), true).unwrap())
            .collect();
        assert_ne!(expected[0], expected[1], "the choices differ");

        let url = format!("{}/v1/completions", gw.url());
        let reply = post_json(&url, &json!({"prompt": prompt, "n": 3, "max_tokens": 6})).await;
        assert_eq!(reply.status, 200, "{service}: {}", reply.text());
        let v = reply.json();
        let choices = v["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3, "{service}: {v}");
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(c["index"], i, "{service}: ordered by index");
            assert_eq!(c["text"], expected[i].as_str(), "{service}");
            assert_eq!(c["finish_reason"], "length");
            assert_eq!(c["logprobs"], Value::Null);
        }
        assert_eq!(v["usage"]["completion_tokens"], 18, "{service}: summed");
        assert_eq!(v["usage"]["prompt_tokens"], ids.len());

        let body = json!({"prompt": prompt, "n": 3, "max_tokens": 6, "stream": true,
                          "stream_options": {"include_usage": true}});
        let events = stream(&gw, "/v1/completions", &body).await;
        let choices = by_choice(&events);
        assert_eq!(choices.len(), 3, "{service}");
        for (i, (text, finish)) in choices.values().enumerate() {
            assert_eq!(text, &expected[i], "{service}: choice {i}");
            assert_eq!(finish.as_deref(), Some("length"));
        }
        let usage = events.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 18);

        // Chat: a role event per choice first, then each choice's deltas.
        let content = "héllo 世界";
        let chat_ids = chat_prompt(&tok, content);
        let body = json!({"messages": [{"role": "user", "content": content}], "n": 2,
                          "max_tokens": 12, "stream": true});
        let events = stream(&gw, "/v1/chat/completions", &body).await;
        for (i, e) in events[..2].iter().enumerate() {
            assert_eq!(e["choices"][0]["index"], i);
            assert_eq!(e["choices"][0]["delta"]["role"], "assistant");
        }
        let choices = by_choice(&events);
        for (i, (text, finish)) in choices.values().enumerate() {
            let want = tok.decode(&rotated(&chat_ids, i, 12), true).unwrap();
            assert_eq!(text, &want, "{service}: chat choice {i}");
            assert_eq!(finish.as_deref(), Some("length"));
        }
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &json!({"messages": [{"role": "user", "content": content}], "n": 2,
                    "max_tokens": 12}),
        )
        .await;
        let v = reply.json();
        for i in 0..2 {
            let want = tok.decode(&rotated(&chat_ids, i, 12), true).unwrap();
            assert_eq!(v["choices"][i]["message"]["content"], want.as_str());
        }
    }
}

#[tokio::test]
async fn a_stop_string_ends_one_choice_while_the_others_go_on() {
    for service in SERVICES {
        let (e, gw, tok) = setup(service, "stop", &["--itl-ms", "2"]).await;
        let prompt = "abcdef";
        let ids = tok.encode(prompt, true).unwrap().get_ids().to_vec();
        assert_eq!(ids.len(), 6, "one id per letter");
        // Sequence 0 reads "ab…" and stops at "b"; 1 starts at "b"; 2 reads "cdef".
        let want = [("a", "stop", 2), ("", "stop", 1), ("cdef", "length", 4)];
        let body = json!({"prompt": prompt, "n": 3, "max_tokens": 4, "stop": "b"});
        let reply = post_json(&format!("{}/v1/completions", gw.url()), &body).await;
        assert_eq!(reply.status, 200, "{service}: {}", reply.text());
        let v = reply.json();
        for (i, (text, finish, _)) in want.iter().enumerate() {
            assert_eq!(v["choices"][i]["text"], *text, "{service}: {v}");
            assert_eq!(v["choices"][i]["finish_reason"], *finish, "{service}");
        }
        let tokens: u32 = want.iter().map(|w| w.2).sum();
        assert_eq!(v["usage"]["completion_tokens"], tokens, "{service}");

        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let events = stream(&gw, "/v1/completions", &streamed).await;
        let choices = by_choice(&events);
        for (i, (text, finish, _)) in want.iter().enumerate() {
            assert_eq!(choices[&(i as u64)].0, *text, "{service}: choice {i}");
            assert_eq!(choices[&(i as u64)].1.as_deref(), Some(*finish));
        }
        // Choice 2 went on after choices 0 and 1 ended: its text comes after their ends.
        let last_end = events
            .iter()
            .rposition(|e| {
                e["choices"][0]["index"] != 2 && !e["choices"][0]["finish_reason"].is_null()
            })
            .unwrap();
        let first_of_2 = events
            .iter()
            .position(|e| e["choices"][0]["index"] == 2 && e["choices"][0]["text"] != "")
            .unwrap();
        let end_of_2 = events
            .iter()
            .position(|e| {
                e["choices"][0]["index"] == 2 && e["choices"][0]["finish_reason"] == "length"
            })
            .unwrap();
        assert!(first_of_2 < end_of_2 && last_end < end_of_2, "{events:?}");
        // The engine finished every sequence itself: nothing to abort.
        assert!(
            !e.log_text().contains("abort request_id="),
            "{}",
            e.log_text()
        );

        // Every choice stopped early: the engine is told to stop.
        let body = json!({"prompt": prompt, "n": 2, "max_tokens": 500, "stop": "d"});
        let v = post_json(&format!("{}/v1/completions", gw.url()), &body)
            .await
            .json();
        assert_eq!(v["choices"][0]["text"], "abc");
        assert_eq!(v["choices"][1]["text"], "bc");
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                e.log_text().contains("abort request_id=cmpl-")
            })
            .await,
            "{service}: no Abort once every choice stopped:\n{}",
            e.log_text()
        );
    }
}

/// Checks chat `logprobs.content` entries against the mock's scores of `ids`.
fn check_chat_entries(tok: &Tokenizer, content: &[Value], ids: &[u32], top: u32) {
    assert_eq!(content.len(), ids.len(), "{content:?}");
    for (k, (entry, &id)) in content.iter().zip(ids).enumerate() {
        assert_eq!(entry["token"], spelled(tok, id).as_str(), "{entry}");
        assert_eq!(entry["bytes"], json!(token_bytes(tok, id)), "{entry}");
        assert_eq!(as_f32(&entry["logprob"]), score(k + 1, 0), "{entry}");
        let alternatives = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(alternatives.len(), top as usize, "{entry}");
        for (j, alt) in (0u32..).zip(alternatives) {
            assert_eq!(alt["token"], spelled(tok, id + j).as_str(), "{alt}");
            assert_eq!(alt["bytes"], json!(token_bytes(tok, id + j)), "{alt}");
            assert_eq!(as_f32(&alt["logprob"]), score(k + 1, j), "{alt}");
        }
    }
}

#[tokio::test]
async fn chat_logprobs_take_openais_shape() {
    for service in SCORING {
        let (_e, gw, tok) = setup(service, "chat-lp", &[]).await;
        let content = "hé🎉!";
        let prompt = chat_prompt(&tok, content);
        let url = format!("{}/v1/chat/completions", gw.url());
        let messages = json!([{"role": "user", "content": content}]);
        let reply = post_json(
            &url,
            &json!({"messages": messages, "max_tokens": 9, "logprobs": true, "top_logprobs": 2}),
        )
        .await;
        assert_eq!(reply.status, 200, "{service}: {}", reply.text());
        let v = reply.json();
        let ids = rotated(&prompt, 0, 9);
        // The first id is <|im_start|>: no text of its own, its entry goes out with the
        // next token's text; every generated token has an entry, in order.
        let entries = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
        check_chat_entries(&tok, entries, &ids, 2);
        assert_eq!(
            v["choices"][0]["message"]["content"],
            tok.decode(&ids, true).unwrap().as_str()
        );

        // Streamed, with special tokens shown: each delta carries the entries of the
        // tokens whose text it carries, so their bytes make its text.
        // Up to <|im_end|>, an EOS id: counted, but neither shown nor scored.
        let im_end = tok.token_to_id(common::tokenizer::IM_END).unwrap();
        let upto = prompt.iter().position(|&id| id == im_end).unwrap();
        let body = json!({"messages": messages, "max_tokens": upto, "logprobs": true,
                          "skip_special_tokens": false, "stream": true});
        let events = stream(&gw, "/v1/chat/completions", &body).await;
        let mut all = Vec::new();
        for e in &events {
            let choice = &e["choices"][0];
            let text = choice["delta"]["content"].as_str().unwrap_or("");
            let Some(content) = choice["logprobs"]["content"].as_array() else {
                assert!(text.is_empty(), "{service}: text without entries: {e}");
                continue;
            };
            let bytes: Vec<u8> = content
                .iter()
                .flat_map(|c| c["bytes"].as_array().unwrap().clone())
                .map(|b| b.as_u64().unwrap() as u8)
                .collect();
            assert_eq!(bytes, text.as_bytes(), "{service}: {e}");
            all.extend(content.iter().cloned());
        }
        check_chat_entries(&tok, &all, &prompt[..upto], 0);
    }
}

#[tokio::test]
async fn completion_logprobs_take_the_legacy_shape() {
    for service in SCORING {
        let (_e, gw, tok) = setup(service, "text-lp", &[]).await;
        let prompt = "hé🎉!";
        let ids = tok.encode(prompt, true).unwrap().get_ids().to_vec();
        assert_eq!(ids.len(), 8, "one id per byte");
        let url = format!("{}/v1/completions", gw.url());
        let body = json!({"prompt": prompt, "max_tokens": 8, "logprobs": 2});
        let reply = post_json(&url, &body).await;
        assert_eq!(reply.status, 200, "{service}: {}", reply.text());
        let v = reply.json();
        assert_eq!(v["choices"][0]["text"], prompt);
        let lp = &v["choices"][0]["logprobs"];
        let tokens: Vec<String> = ids.iter().map(|&id| spelled(&tok, id)).collect();
        assert_eq!(lp["tokens"], json!(tokens), "{service}: {lp}");
        for (k, value) in lp["token_logprobs"].as_array().unwrap().iter().enumerate() {
            assert_eq!(as_f32(value), score(k + 1, 0));
        }
        // A token holding part of a character starts where that character does.
        assert_eq!(lp["text_offset"], json!([0, 1, 1, 2, 2, 2, 2, 3]));
        for (k, (top, &id)) in lp["top_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(&ids)
            .enumerate()
        {
            let mut want = serde_json::Map::new();
            for j in 0..2 {
                let token = spelled(&tok, id + j);
                if !want.contains_key(&token) {
                    want.insert(token, json!(score(k + 1, j)));
                }
            }
            let got: BTreeMap<&String, f32> = top
                .as_object()
                .unwrap()
                .iter()
                .map(|(t, v)| (t, as_f32(v)))
                .collect();
            let want: BTreeMap<&String, f32> = want.iter().map(|(t, v)| (t, as_f32(v))).collect();
            assert_eq!(got, want, "{service}: token {k}");
        }

        // Streamed: the chunks' entries, joined, are the whole answer's.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let events = stream(&gw, "/v1/completions", &streamed).await;
        let mut joined = Vec::new();
        let mut offsets = Vec::new();
        for e in &events {
            if let Some(tokens) = e["choices"][0]["logprobs"]["tokens"].as_array() {
                joined.extend(tokens.iter().map(|t| t.as_str().unwrap().to_owned()));
                offsets.extend(
                    e["choices"][0]["logprobs"]["text_offset"]
                        .as_array()
                        .unwrap()
                        .clone(),
                );
            }
        }
        assert_eq!(joined, tokens, "{service}");
        assert_eq!(json!(offsets), json!([0, 1, 1, 2, 2, 2, 2, 3]));

        // A stop string: the tokens of the held-back text never get entries.
        let body = json!({"prompt": "abcdef", "max_tokens": 6, "logprobs": 0, "stop": "cd"});
        let v = post_json(&url, &body).await.json();
        assert_eq!(v["choices"][0]["text"], "ab");
        assert_eq!(v["choices"][0]["logprobs"]["tokens"], json!(["a", "b"]));
        assert_eq!(v["choices"][0]["logprobs"]["top_logprobs"], json!([{}, {}]));
    }
}

#[tokio::test]
async fn n_and_logprobs_out_of_bounds_are_refused() {
    let (e, gw, _tok) = setup("sglang", "bounds", &[]).await;
    let chat = format!("{}/v1/chat/completions", gw.url());
    let text = format!("{}/v1/completions", gw.url());
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (url, body, says) in [
        (
            &chat,
            json!({"messages": msgs, "n": 0}),
            "n must be between 1 and 16",
        ),
        (
            &chat,
            json!({"messages": msgs, "n": 17}),
            "n must be between 1 and 16",
        ),
        (
            &chat,
            json!({"messages": msgs, "logprobs": true, "top_logprobs": 21}),
            "top_logprobs must be between 0 and 20",
        ),
        (
            &chat,
            json!({"messages": msgs, "top_logprobs": 3}),
            "logprobs: true",
        ),
        (
            &text,
            json!({"prompt": "hi", "logprobs": 6}),
            "between 0 and 5",
        ),
        (
            &text,
            json!({"prompt": "hi", "n": 17}),
            "n must be between 1 and 16",
        ),
    ] {
        let reply = post_json(url, &body).await;
        support::assert_gateway_error(&reply, 400, "invalid_request");
        assert!(reply.text().contains(says), "{body}: {}", reply.text());
    }
    assert!(
        !e.log_text().contains("generate request_id"),
        "refused before the engine"
    );
    // The largest n is served.
    let v = post_json(&text, &json!({"prompt": "hi", "n": 16, "max_tokens": 2}))
        .await
        .json();
    assert_eq!(v["choices"].as_array().unwrap().len(), 16, "{v}");
}
