//! Conformance transcripts: `grpc-engine` (mock mode) speaking each service, black box over
//! HTTP/2, answers each case with exactly the message sequence that service's published
//! servicer sends. Each expectation names the servicer function it mirrors:
//! `smg_grpc_servicer/<engine>/servicer.py` in lightseekorg/smg for SGLang, vLLM, TokenSpeed
//! and MLX, `tensorrt_llm/grpc/smg/servicer.py` in NVIDIA/TensorRT-LLM. The gateway's own
//! tests run on this stand-in, so these transcripts are what keeps them honest.
//!
//! A line per message: `chunk INDEX [IDS] n=COMPLETION_TOKENS` (with ` lp=[SCORED IDS]`
//! when the message carries scores), `complete INDEX [IDS] REASON n=COMPLETION_TOKENS`
//! (with ` matched=ID`), then `end` (the stream closed cleanly), `status CODE`, or `open`
//! (nothing more within a while, the call left open).
//!
//! The mock echoes the prompt's ids, cycling, one id a step; with `n` > 1 sequence `i`
//! echoes the prompt rotated by `i`. Stop strings need a tokenizer the mock does not have:
//! they are the llama.cpp adapter's (`tests/real_engine/test_13_grpc_parity.py`).

use crate::common;
use crate::grpc_client;

use std::net::SocketAddr;
use std::time::Duration;

use common::{grpc_engine, Proc};
use grpc_client::channel;
use tollgate::engine::grpc::{mlx, sglang, tokenspeed, trtllm, vllm};

/// One request, in no service's shape.
#[derive(Clone)]
struct Case {
    id: &'static str,
    prompt: Vec<u32>,
    max: u32,
    stream: bool,
    n: u32,
    logprobs: Option<u32>,
    stop_ids: Vec<u32>,
    /// Abort the generation once its first message arrived.
    abort: bool,
}

fn case(id: &'static str, prompt: &[u32], max: u32) -> Case {
    Case {
        id,
        prompt: prompt.to_vec(),
        max,
        stream: true,
        n: 1,
        logprobs: None,
        stop_ids: Vec::new(),
        abort: false,
    }
}

/// How long a stream may say nothing before the call counts as left open.
const QUIET: Duration = Duration::from_millis(400);

fn ids(ids: &[u32]) -> String {
    format!("{ids:?}")
}

fn scored(lp: Option<Vec<u32>>) -> String {
    lp.map_or(String::new(), |ids| format!(" lp={ids:?}"))
}

fn chunk_line(index: u32, token_ids: &[u32], n: u32, lp: Option<Vec<u32>>) -> String {
    format!("chunk {index} {} n={n}{}", ids(token_ids), scored(lp))
}

fn complete_line(
    index: u32,
    token_ids: &[u32],
    reason: &str,
    n: u32,
    matched: Option<u32>,
    lp: Option<Vec<u32>>,
) -> String {
    let matched = matched.map_or(String::new(), |id| format!(" matched={id}"));
    format!(
        "complete {index} {} {reason} n={n}{matched}{}",
        ids(token_ids),
        scored(lp)
    )
}

/// Reads a Generate stream into lines; `$line` maps one message's body to its line.
/// After an abort, the chunks still in flight are left out: only what the servicer sends
/// because of the abort is compared.
macro_rules! transcript {
    ($client:expr, $request:expr, $case:expr, $abort:expr, $line:expr) => {{
        let mut out = Vec::new();
        let mut abort = Some($abort);
        match $client.generate($request).await {
            Err(status) => out.push(format!("status {:?}", status.code())),
            Ok(response) => {
                let mut stream = response.into_inner();
                let mut aborted = false;
                loop {
                    match tokio::time::timeout(QUIET, stream.message()).await {
                        Err(_) => {
                            out.push("open".to_owned());
                            break;
                        }
                        Ok(Err(status)) => {
                            out.push(format!("status {:?}", status.code()));
                            break;
                        }
                        Ok(Ok(None)) => {
                            out.push("end".to_owned());
                            break;
                        }
                        Ok(Ok(Some(message))) => {
                            let line: String = $line(message);
                            let in_flight =
                                aborted && line.starts_with("chunk") && !line.contains(" [] ");
                            if !in_flight {
                                out.push(line);
                            }
                            if $case.abort && !aborted {
                                aborted = true;
                                out.clear();
                                if let Some(abort) = abort.take() {
                                    abort.await;
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }};
}

/// The whole exchange of `case` with the engine at `addr` speaking `service`.
async fn run(service: &str, addr: SocketAddr, case: &Case) -> Vec<String> {
    let (channel, origin) = channel(addr).await;
    let max = Some(case.max);
    let lp = case.logprobs.map(|k| i32::try_from(k).unwrap());
    let id = case.id.to_owned();
    match service {
        "sglang" => {
            let mut c = sglang::sglang_scheduler_client::SglangSchedulerClient::with_origin(
                channel, origin,
            );
            let request = sglang::GenerateRequest {
                request_id: id.clone(),
                tokenized: Some(sglang::TokenizedInput {
                    original_text: String::new(),
                    input_ids: case.prompt.clone(),
                }),
                sampling_params: Some(sglang::SamplingParams {
                    temperature: 0.0,
                    top_p: 1.0,
                    top_k: -1,
                    repetition_penalty: 1.0,
                    max_new_tokens: max.map(|m| m as i32),
                    stop_token_ids: case.stop_ids.clone(),
                    n: case.n as i32,
                    ..Default::default()
                }),
                return_logprob: lp.is_some(),
                top_logprobs_num: lp.unwrap_or(0),
                logprob_start_len: -1,
                stream: case.stream,
                ..Default::default()
            };
            let mut aborter = c.clone();
            let abort = async move {
                let r = sglang::AbortRequest {
                    request_id: id,
                    reason: String::new(),
                };
                aborter.abort(r).await.expect("abort");
            };
            transcript!(c, request, case, abort, |m: sglang::GenerateResponse| {
                use sglang::generate_complete::MatchedStop;
                use sglang::generate_response::Response;
                match m.response.expect("a body") {
                    Response::Chunk(c) => chunk_line(
                        c.index,
                        &c.token_ids,
                        c.completion_tokens as u32,
                        c.output_logprobs.map(|s| s.token_ids),
                    ),
                    Response::Complete(x) => complete_line(
                        x.index,
                        &x.output_ids,
                        &x.finish_reason,
                        x.completion_tokens as u32,
                        match x.matched_stop {
                            Some(MatchedStop::MatchedTokenId(id)) => Some(id),
                            _ => None,
                        },
                        x.output_logprobs.map(|s| s.token_ids),
                    ),
                    Response::Error(e) => format!("error {}", e.http_status_code),
                }
            })
        }
        "vllm" => {
            let mut c = vllm::vllm_engine_client::VllmEngineClient::with_origin(channel, origin);
            let request = vllm::GenerateRequest {
                request_id: id.clone(),
                input: Some(vllm::generate_request::Input::Tokenized(
                    vllm::TokenizedInput {
                        original_text: String::new(),
                        input_ids: case.prompt.clone(),
                    },
                )),
                sampling_params: Some(vllm::SamplingParams {
                    temperature: Some(0.0),
                    top_p: 1.0,
                    repetition_penalty: 1.0,
                    max_tokens: max,
                    stop_token_ids: case.stop_ids.clone(),
                    n: case.n,
                    logprobs: lp,
                    ..Default::default()
                }),
                stream: case.stream,
                kv_transfer_params_json: None,
            };
            let mut aborter = c.clone();
            let abort = async move {
                let r = vllm::AbortRequest {
                    request_ids: vec![id],
                };
                aborter.abort(r).await.expect("abort");
            };
            transcript!(c, request, case, abort, |m: vllm::GenerateResponse| {
                use vllm::generate_complete::MatchedStop;
                use vllm::generate_response::Response;
                match m.response.expect("a body") {
                    Response::Chunk(c) => chunk_line(
                        c.index,
                        &c.token_ids,
                        c.completion_tokens,
                        c.output_logprobs.map(|s| s.token_ids),
                    ),
                    Response::Complete(x) => complete_line(
                        x.index,
                        &x.output_ids,
                        &x.finish_reason,
                        x.completion_tokens,
                        match x.matched_stop {
                            Some(MatchedStop::MatchedTokenId(id)) => Some(id),
                            _ => None,
                        },
                        x.output_logprobs.map(|s| s.token_ids),
                    ),
                }
            })
        }
        "tokenspeed" => {
            let mut c =
                tokenspeed::token_speed_scheduler_client::TokenSpeedSchedulerClient::with_origin(
                    channel, origin,
                );
            let request = tokenspeed::GenerateRequest {
                request_id: id.clone(),
                tokenized: Some(tokenspeed::TokenizedInput {
                    input_ids: case.prompt.clone(),
                    original_text: String::new(),
                }),
                sampling_params: Some(tokenspeed::SamplingParams {
                    temperature: Some(0.0),
                    max_new_tokens: max,
                    stop_token_ids: case.stop_ids.clone(),
                    n: case.n,
                    ..Default::default()
                }),
                return_logprob: lp.is_some(),
                top_logprobs_num: lp.unwrap_or(0),
                logprob_start_len: None,
                stream: case.stream,
            };
            let mut aborter = c.clone();
            let abort = async move {
                let r = tokenspeed::AbortRequest {
                    request_id: id,
                    reason: String::new(),
                };
                aborter.abort(r).await.expect("abort");
            };
            transcript!(
                c,
                request,
                case,
                abort,
                |m: tokenspeed::GenerateResponse| {
                    use tokenspeed::generate_complete::MatchedStop;
                    use tokenspeed::generate_response::Response;
                    match m.response.expect("a body") {
                        Response::Chunk(c) => chunk_line(
                            c.index,
                            &c.token_ids,
                            c.completion_tokens,
                            c.output_logprobs.map(|s| s.token_ids),
                        ),
                        Response::Complete(x) => complete_line(
                            x.index,
                            &x.output_ids,
                            &x.finish_reason,
                            x.completion_tokens,
                            match x.matched_stop {
                                Some(MatchedStop::MatchedTokenId(id)) => Some(id),
                                _ => None,
                            },
                            x.output_logprobs.map(|s| s.token_ids),
                        ),
                    }
                }
            )
        }
        "trtllm" => {
            let mut c =
                trtllm::trtllm_service_client::TrtllmServiceClient::with_origin(channel, origin);
            let request = trtllm::GenerateRequest {
                request_id: id.clone(),
                tokenized: Some(trtllm::TokenizedInput {
                    original_text: String::new(),
                    input_token_ids: case.prompt.clone(),
                }),
                sampling_config: Some(trtllm::SamplingConfig {
                    beam_width: 1,
                    num_return_sequences: case.n,
                    temperature: Some(0.0),
                    ..Default::default()
                }),
                output_config: Some(trtllm::OutputConfig {
                    logprobs: lp,
                    exclude_input_from_output: true,
                }),
                max_tokens: case.max,
                streaming: case.stream,
                stop_token_ids: case.stop_ids.clone(),
                ignore_eos: false,
            };
            let mut aborter = c.clone();
            let abort = async move {
                let r = trtllm::AbortRequest { request_id: id };
                aborter.abort(r).await.expect("abort");
            };
            let scored = |lp: Vec<trtllm::TokenLogprob>| {
                Some(lp.iter().map(|l| l.token_id).collect::<Vec<u32>>()).filter(|v| !v.is_empty())
            };
            transcript!(c, request, case, abort, |m: trtllm::GenerateResponse| {
                use trtllm::generate_complete::MatchedStop;
                use trtllm::generate_response::Response;
                match m.response.expect("a body") {
                    Response::Chunk(c) => chunk_line(
                        c.sequence_index,
                        &c.token_ids,
                        c.completion_tokens,
                        scored(c.logprobs),
                    ),
                    Response::Complete(x) => complete_line(
                        x.sequence_index,
                        &x.output_token_ids,
                        &x.finish_reason,
                        x.completion_tokens,
                        match x.matched_stop {
                            Some(MatchedStop::MatchedTokenId(id)) => Some(id),
                            _ => None,
                        },
                        scored(x.logprobs),
                    ),
                }
            })
        }
        "mlx" => {
            let mut c = mlx::mlx_engine_client::MlxEngineClient::with_origin(channel, origin);
            let request = mlx::GenerateRequest {
                request_id: id.clone(),
                input: Some(mlx::generate_request::Input::Tokenized(
                    mlx::TokenizedInput {
                        original_text: String::new(),
                        input_ids: case.prompt.clone(),
                    },
                )),
                sampling_params: Some(mlx::SamplingParams {
                    temperature: Some(0.0),
                    top_p: 1.0,
                    repetition_penalty: 1.0,
                    max_tokens: max,
                    stop_token_ids: case.stop_ids.clone(),
                    logprobs: lp,
                    ..Default::default()
                }),
                stream: case.stream,
            };
            let mut aborter = c.clone();
            let abort = async move {
                let r = mlx::AbortRequest {
                    request_ids: vec![id],
                };
                aborter.abort(r).await.expect("abort");
            };
            transcript!(c, request, case, abort, |m: mlx::GenerateResponse| {
                use mlx::generate_response::Response;
                match m.response.expect("a body") {
                    Response::Chunk(c) => chunk_line(
                        c.index,
                        &c.token_ids,
                        c.completion_tokens,
                        c.output_logprobs.map(|s| s.token_ids),
                    ),
                    Response::Complete(x) => complete_line(
                        x.index,
                        &x.output_ids,
                        &x.finish_reason,
                        x.completion_tokens,
                        x.matched_stop_token_id,
                        x.output_logprobs.map(|s| s.token_ids),
                    ),
                }
            })
        }
        other => panic!("no service {other}"),
    }
}

fn engine(service: &str, args: &[&str]) -> Proc {
    grpc_engine(&[&["--service", service, "--itl-ms", "5"], args].concat())
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|l| (*l).to_owned()).collect()
}

/// The lines of sequence `index`, in order.
fn of(index: u32, transcript: &[String]) -> Vec<String> {
    let prefix = [format!("chunk {index} "), format!("complete {index} ")];
    transcript
        .iter()
        .filter(|l| prefix.iter().any(|p| l.starts_with(p.as_str())))
        .cloned()
        .collect()
}

#[tokio::test]
async fn length_stop_token_and_logprobs_streamed() {
    let length = case("length", &[5, 6, 7], 4);
    let stop = Case {
        stop_ids: vec![8],
        ..case("stop", &[4, 8], 10)
    };
    let scores = Case {
        logprobs: Some(1),
        ..case("scores", &[5, 6], 2)
    };
    for (service, want) in [
        (
            // `_create_chunk_response` per step with the cumulative `meta_info` counts,
            // then, for the finishing output, `_create_completion_response` of the same
            // output: its ids and scores again.
            "sglang",
            [
                &[
                    "chunk 0 [5] n=1",
                    "chunk 0 [6] n=2",
                    "chunk 0 [7] n=3",
                    "chunk 0 [5] n=4",
                    "complete 0 [5] length n=4",
                    "end",
                ][..],
                &[
                    "chunk 0 [4] n=1",
                    "chunk 0 [8] n=2",
                    "complete 0 [8] stop n=2 matched=8",
                    "end",
                ],
                &[
                    "chunk 0 [5] n=1 lp=[5]",
                    "chunk 0 [6] n=2 lp=[6]",
                    "complete 0 [6] length n=2 lp=[6]",
                    "end",
                ],
            ],
        ),
        (
            // `_chunk_response`: `completion_tokens=len(completion.token_ids)`, the delta's;
            // `_complete_response` of the same DELTA output: the last delta, counted alone.
            "vllm",
            [
                &[
                    "chunk 0 [5] n=1",
                    "chunk 0 [6] n=1",
                    "chunk 0 [7] n=1",
                    "chunk 0 [5] n=1",
                    "complete 0 [5] length n=1",
                    "end",
                ][..],
                &[
                    "chunk 0 [4] n=1",
                    "chunk 0 [8] n=1",
                    "complete 0 [8] stop n=1 matched=8",
                    "end",
                ],
                &[
                    "chunk 0 [5] n=1 lp=[5]",
                    "chunk 0 [6] n=1 lp=[6]",
                    "complete 0 [6] length n=1 lp=[6]",
                    "end",
                ],
            ],
        ),
        (
            // `_chunk_response` / `_complete_response` through `_generated_output_ids`:
            // the matched stop token trimmed from both, `meta_info.completion_tokens`
            // still counting it.
            "tokenspeed",
            [
                &[
                    "chunk 0 [5] n=1",
                    "chunk 0 [6] n=2",
                    "chunk 0 [7] n=3",
                    "chunk 0 [5] n=4",
                    "complete 0 [5] length n=4",
                    "end",
                ][..],
                &[
                    "chunk 0 [4] n=1",
                    "chunk 0 [] n=2",
                    "complete 0 [] stop n=2 matched=8",
                    "end",
                ],
                &[
                    "chunk 0 [5] n=1 lp=[5]",
                    "chunk 0 [6] n=2 lp=[6]",
                    "complete 0 [6] length n=2 lp=[6]",
                    "end",
                ],
            ],
        ),
        (
            // `_chunk_responses`: the new ids, `completion_tokens=len(all tokens)`;
            // `_complete_responses`: every id and score; a stop token is trimmed from the
            // final result (`_handle_sequence`), so no chunk carries it.
            "trtllm",
            [
                &[
                    "chunk 0 [5] n=1",
                    "chunk 0 [6] n=2",
                    "chunk 0 [7] n=3",
                    "chunk 0 [5] n=4",
                    "complete 0 [5, 6, 7, 5] length n=4",
                    "end",
                ][..],
                &[
                    "chunk 0 [4] n=1",
                    "complete 0 [4] stop n=1 matched=8",
                    "end",
                ],
                &[
                    "chunk 0 [5] n=1 lp=[5]",
                    "chunk 0 [6] n=2 lp=[6]",
                    "complete 0 [5, 6] length n=2 lp=[5, 6]",
                    "end",
                ],
            ],
        ),
        (
            // `Generate`, streamed: one `_chunk_response` per token, then
            // `_complete_response(output_ids=[])` with the count and no scores.
            "mlx",
            [
                &[
                    "chunk 0 [5] n=1",
                    "chunk 0 [6] n=2",
                    "chunk 0 [7] n=3",
                    "chunk 0 [5] n=4",
                    "complete 0 [] length n=4",
                    "end",
                ][..],
                &[
                    "chunk 0 [4] n=1",
                    "chunk 0 [8] n=2",
                    "complete 0 [] stop n=2 matched=8",
                    "end",
                ],
                &[
                    "chunk 0 [5] n=1 lp=[5]",
                    "chunk 0 [6] n=2 lp=[6]",
                    "complete 0 [] length n=2",
                    "end",
                ],
            ],
        ),
    ] {
        let e = engine(service, &[]);
        for (case, want) in [&length, &stop, &scores].into_iter().zip(want) {
            let got = run(service, e.addr, case).await;
            assert_eq!(got, lines(want), "{service} {}", case.id);
        }
    }
}

#[tokio::test]
async fn several_sequences_streamed_and_not() {
    let streamed = Case {
        n: 3,
        ..case("three", &[5, 6, 7], 2)
    };
    let whole = Case {
        stream: false,
        ..streamed.clone()
    };
    // Sequence i echoes the prompt rotated by i.
    let seqs: [[u32; 2]; 3] = [[5, 6], [6, 7], [7, 5]];
    for service in ["sglang", "vllm", "tokenspeed", "trtllm"] {
        let e = engine(service, &[]);
        let got = run(service, e.addr, &streamed).await;
        assert_eq!(
            got.last().map(String::as_str),
            Some("end"),
            "{service}: {got:?}"
        );
        for (i, [a, b]) in seqs.iter().enumerate() {
            let i = i as u32;
            let (na, nb, nx) = if service == "vllm" {
                (1, 1, 1)
            } else {
                (1, 2, 2)
            };
            let last = if service == "trtllm" {
                format!("complete {i} [{a}, {b}] length n={nx}")
            } else {
                format!("complete {i} [{b}] length n={nx}")
            };
            assert_eq!(
                of(i, &got),
                [
                    format!("chunk {i} [{a}] n={na}"),
                    format!("chunk {i} [{b}] n={nb}"),
                    last
                ],
                "{service}: {got:?}"
            );
        }
        if service == "trtllm" {
            // `Generate` sends the completes once the whole result finished.
            let first_complete = got.iter().position(|l| l.starts_with("complete")).unwrap();
            assert!(got[first_complete..got.len() - 1]
                .iter()
                .all(|l| l.starts_with("complete")));
        }
        // Not streamed: one complete per sequence with every id; SGLang's name index 0
        // (`generate_request` never sets it on that path), the others their own.
        let got = run(service, e.addr, &whole).await;
        let want: Vec<String> = seqs
            .iter()
            .enumerate()
            .map(|(i, [a, b])| {
                let index = if service == "sglang" { 0 } else { i };
                format!("complete {index} [{a}, {b}] length n=2")
            })
            .chain(["end".to_owned()])
            .collect();
        assert_eq!(got, want, "{service}");
    }
    // MLX's request has no `n`: one sequence, one complete with every id when unstreamed.
    let e = engine("mlx", &[]);
    let got = run("mlx", e.addr, &whole).await;
    assert_eq!(got, lines(&["complete 0 [5, 6] length n=2", "end"]));
}

#[tokio::test]
async fn an_abort_mid_stream_ends_each_service_its_own_way() {
    let long = Case {
        abort: true,
        ..case("long", &[5, 6, 7], 1000)
    };
    for (service, want) in [
        // `abort_request` marks the request finished; its last output is dropped
        // (`_handle_batch_output`): nothing more, the call left open.
        ("sglang", &["open"][..]),
        // vLLM's output processor ends an aborted request with an empty final output:
        // `_chunk_response` of it, then `_complete_response` with finish_reason "abort".
        (
            "vllm",
            &["chunk 0 [] n=0", "complete 0 [] abort n=0", "end"],
        ),
        // `Abort` deletes the request's state and no finish is streamed.
        ("tokenspeed", &["open"]),
        // The executor's CANCELLED response through `_complete_responses` (every id so far,
        // compared here by its reason only).
        ("trtllm", &["complete cancelled", "end"]),
        // The generation loop's `None` sentinel ends the stream without a complete.
        ("mlx", &["end"]),
    ] {
        let e = engine(service, &[]);
        let mut got = run(service, e.addr, &long).await;
        if service == "trtllm" {
            for line in &mut got {
                if line.starts_with("complete 0 [") && line.contains("] cancelled") {
                    *line = "complete cancelled".to_owned();
                }
            }
        }
        assert_eq!(got, lines(want), "{service}");
    }
}

#[tokio::test]
async fn errors_are_statuses_before_and_after_the_first_chunk() {
    for service in ["sglang", "vllm", "tokenspeed", "trtllm", "mlx"] {
        // Refused before anything is generated: the prompt fills the context window
        // (`ValueError` → `INVALID_ARGUMENT`).
        let e = engine(service, &["--max-context", "3"]);
        let got = run(service, e.addr, &case("refused", &[5, 6, 7], 4)).await;
        assert_eq!(got, lines(&["status InvalidArgument"]), "{service}");
        // Failed after the first chunks (`context.abort(INTERNAL)` mid-stream).
        let e = engine(service, &["--drop-after", "2"]);
        let got = run(service, e.addr, &case("broken", &[5, 6, 7], 10)).await;
        let want = if service == "vllm" {
            ["chunk 0 [5] n=1", "chunk 0 [6] n=1", "status Internal"]
        } else {
            ["chunk 0 [5] n=1", "chunk 0 [6] n=2", "status Internal"]
        };
        assert_eq!(got, lines(&want), "{service}");
    }
}

#[tokio::test]
async fn an_eos_ends_each_service_its_own_way() {
    let eos = case("eos", &[4, 2, 8], 10);
    for (service, want) in [
        // The EOS id is kept in the ids and named as the matched token
        // (`_create_completion_response`: `matched` of the finish reason).
        (
            "sglang",
            &[
                "chunk 0 [4] n=1",
                "chunk 0 [2] n=2",
                "complete 0 [2] stop n=2 matched=2",
                "end",
            ][..],
        ),
        // vLLM's `stop_reason` is None for an EOS: no matched stop.
        (
            "vllm",
            &[
                "chunk 0 [4] n=1",
                "chunk 0 [2] n=1",
                "complete 0 [2] stop n=1",
                "end",
            ],
        ),
        // TokenSpeed finishes on it as FINISH_MATCHED_TOKEN: trimmed, counted, named.
        (
            "tokenspeed",
            &[
                "chunk 0 [4] n=1",
                "chunk 0 [] n=2",
                "complete 0 [] stop n=2 matched=2",
                "end",
            ],
        ),
        // TensorRT-LLM's END_ID finish names nothing and trims nothing.
        (
            "trtllm",
            &[
                "chunk 0 [4] n=1",
                "chunk 0 [2] n=2",
                "complete 0 [4, 2] stop n=2",
                "end",
            ],
        ),
        // MLX makes EOS ids single-token stop sequences (`_build_state_machine`).
        (
            "mlx",
            &[
                "chunk 0 [4] n=1",
                "chunk 0 [2] n=2",
                "complete 0 [] stop n=2 matched=2",
                "end",
            ],
        ),
    ] {
        let e = engine(service, &["--eos-token-id", "2"]);
        let got = run(service, e.addr, &eos).await;
        assert_eq!(got, lines(want), "{service}");
    }
}
