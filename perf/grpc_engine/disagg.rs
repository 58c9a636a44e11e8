//! Prefill/decode roles (`--disaggregation-mode`): enough of an engine's disaggregation to
//! check, from the engines' side, what a gateway does with a pair.
//!
//! The "KV cache" a prefill keeps is the prompt's token ids, under a key the pair agrees
//! on: SGLang's bootstrap room, or for vLLM's connectors the prefill's request id, which
//! its answer's `kv_transfer_params` name. A decode engine fetches it over a plain TCP
//! side channel on the prefill's bootstrap port and compares it with its own prompt, so a
//! gateway that sends the legs different prompts, different rooms or no handoff at all is
//! caught. The side channel speaks one line each way: `FETCH <key>` is answered
//! `KV <id>,<id>,...` (the entry is handed over once) or `MISSING`; `AWAIT <key>` (SGLang's
//! legs run at once) is answered once the prefill has kept the entry.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tollgate::engine::grpc::sglang::GenerateRequest;

use crate::cli::{Flags, Role, Service};
use crate::say::{self, Id};

/// Caches kept at once; the oldest goes first (a decode that never came).
const MAX_KEPT: usize = 4096;
/// How long a prefill holds a decode's request for a cache it is still computing.
const FETCH_PATIENCE: Duration = Duration::from_secs(10);
const FETCH_PAUSE: Duration = Duration::from_millis(1);
/// The longest side-channel line read.
const MAX_LINE: usize = 4 * 1024 * 1024;

/// What a request says about its pair.
#[derive(Clone, Debug, PartialEq)]
pub enum Handoff {
    /// Nothing.
    None,
    /// SGLang's `disaggregated_params`.
    Bootstrap { host: String, port: i32, room: i32 },
    /// vLLM's `kv_transfer_params`, as sent.
    KvTransfer(String),
}

impl Handoff {
    /// SGLang's fields, when the request carries them.
    pub fn of_sglang(request: &GenerateRequest) -> Handoff {
        match &request.disaggregated_params {
            Some(d) => Handoff::Bootstrap {
                host: d.bootstrap_host.clone(),
                port: d.bootstrap_port,
                room: d.bootstrap_room,
            },
            None => Handoff::None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Handoff::None => "none".to_owned(),
            Handoff::Bootstrap { host, port, room } => format!("bootstrap:{host}:{port}/{room}"),
            Handoff::KvTransfer(json) => format!("json:{}", json.replace(char::is_whitespace, "")),
        }
    }
}

/// Where a decode fetches its cache: the prefill's side channel and the key.
#[derive(Debug, PartialEq)]
struct Source {
    host: String,
    port: u16,
    key: String,
}

/// Why a leg is refused before it generates.
#[derive(Debug, PartialEq)]
pub struct Refusal(pub String);

/// A prefill engine's caches and its side channel; inert for the other roles.
pub struct Disagg {
    role: Role,
    service: Service,
    host: String,
    /// The side channel's port (a prefill engine's, once bound).
    port: u16,
    omit_params: bool,
    kept: Arc<Mutex<Kept>>,
}

#[derive(Default)]
struct Kept {
    by_key: HashMap<String, Vec<u32>>,
    order: VecDeque<String>,
}

impl Disagg {
    /// The role's state; a prefill engine binds its side channel and serves it from here.
    pub async fn start(flags: &Flags) -> Result<Disagg, String> {
        let kept = Arc::new(Mutex::new(Kept::default()));
        let mut port = flags.bootstrap_port;
        if flags.role == Role::Prefill {
            let listener = TcpListener::bind((flags.host.as_str(), flags.bootstrap_port))
                .await
                .map_err(|e| {
                    format!(
                        "cannot listen on bootstrap port {}: {e}",
                        flags.bootstrap_port
                    )
                })?;
            let addr = listener
                .local_addr()
                .map_err(|e| format!("cannot read the bootstrap address: {e}"))?;
            port = addr.port();
            tokio::spawn(serve(listener, kept.clone()));
        }
        Ok(Disagg {
            role: flags.role,
            service: flags.service,
            host: flags.host.clone(),
            port,
            omit_params: flags.faults.omit_kv_params,
            kept,
        })
    }

    /// A prefill engine's side-channel port.
    pub fn bootstrap_port(&self) -> Option<u16> {
        (self.role == Role::Prefill).then_some(self.port)
    }

    /// Checks a leg's handoff and shapes its request for the role: a prefill generates
    /// one token. Returns the key a prefill keeps its cache under.
    pub fn admit(
        &self,
        request: &mut GenerateRequest,
        handoff: &Handoff,
    ) -> Result<Option<String>, Refusal> {
        if self.role != Role::Null {
            say::line(format_args!(
                "handoff request_id={} role={} kv={}",
                Id(&request.request_id),
                if self.role == Role::Prefill {
                    "prefill"
                } else {
                    "decode"
                },
                handoff.describe()
            ));
        }
        if self.role != Role::Prefill {
            return Ok(None);
        }
        let key = match handoff {
            Handoff::Bootstrap { port, room, .. } if *port == i32::from(self.port) => {
                format!("room:{room}")
            }
            Handoff::Bootstrap { port, .. } => {
                return Err(Refusal(format!(
                    "bootstrap_port {port} is not this prefill engine's ({})",
                    self.port
                )))
            }
            Handoff::KvTransfer(json) if asks_remote_decode(json) => {
                format!("req:{}", request.request_id)
            }
            Handoff::KvTransfer(_) => {
                return Err(Refusal(
                    "a prefill engine needs kv_transfer_params with do_remote_decode: true".into(),
                ))
            }
            Handoff::None => {
                return Err(Refusal(
                    "a prefill engine needs the pair's disaggregation parameters".into(),
                ))
            }
        };
        if let Some(params) = request.sampling_params.as_mut() {
            params.max_new_tokens = Some(1);
        }
        Ok(Some(key))
    }

    /// A prefill's cache, kept once its generation ended.
    pub fn keep(&self, key: String, ids: &[u32]) {
        say::line(format_args!("kv_stored key={} ids={}", Id(&key), ids.len()));
        if let Ok(mut kept) = self.kept.lock() {
            if kept.by_key.len() >= MAX_KEPT {
                if let Some(oldest) = kept.order.pop_front() {
                    kept.by_key.remove(&oldest);
                }
            }
            kept.order.push_back(key.clone());
            kept.by_key.insert(key, ids.to_vec());
        }
    }

    /// What a vLLM prefill answers for its decode leg; `None` for other roles, other
    /// handoffs and under `--omit-kv-params`.
    pub fn answer_params(&self, request_id: &str, handoff: &Handoff) -> Option<String> {
        let asked = matches!(handoff, Handoff::KvTransfer(json) if asks_remote_decode(json));
        if self.role != Role::Prefill || !asked || self.omit_params {
            return None;
        }
        Some(
            json!({
                "do_remote_prefill": true,
                "do_remote_decode": false,
                "remote_engine_id": format!("grpc-engine-{}", self.port),
                "remote_host": self.host,
                "remote_port": self.port,
                "remote_block_ids": [0],
                "remote_request_id": request_id,
            })
            .to_string(),
        )
    }

    /// A decode leg's cache: fetched from its prefill and checked against `prompt`
    /// (nothing to fetch for the other roles, or without a handoff under vLLM's protocol:
    /// the prompt is recomputed).
    pub async fn receive(
        &self,
        request_id: &str,
        handoff: &Handoff,
        prompt: &[u32],
    ) -> Result<(), Refusal> {
        if self.role != Role::Decode {
            return Ok(());
        }
        let (source, patient) = match handoff {
            // vLLM: a decode sent no parameters computes the prompt itself.
            Handoff::None if self.service == Service::Vllm => {
                say::line(format_args!("kv_recompute request_id={}", Id(request_id)));
                return Ok(());
            }
            Handoff::None => {
                return Err(Refusal(
                    "a decode engine needs the pair's disaggregation parameters".into(),
                ))
            }
            Handoff::Bootstrap { host, port, room } => (
                Source {
                    host: host.clone(),
                    port: u16::try_from(*port)
                        .map_err(|_| Refusal(format!("bootstrap_port {port} is not a port")))?,
                    key: format!("room:{room}"),
                },
                // Both legs run at once: the prefill may still be computing.
                true,
            ),
            Handoff::KvTransfer(json) => match remote_source(json) {
                Some(source) => (source, false),
                None => {
                    say::line(format_args!("kv_recompute request_id={}", Id(request_id)));
                    return Ok(());
                }
            },
        };
        let ids = fetch(&source, patient).await?;
        if ids != prompt {
            return Err(Refusal(format!(
                "the KV cache under {} is for another prompt ({} ids, this one has {})",
                source.key,
                ids.len(),
                prompt.len()
            )));
        }
        say::line(format_args!(
            "kv_fetched key={} from={}:{} ids={}",
            Id(&source.key),
            source.host,
            source.port,
            ids.len()
        ));
        Ok(())
    }
}

/// Whether vLLM's `kv_transfer_params` ask a prefill to keep its cache for a remote decode.
fn asks_remote_decode(json: &str) -> bool {
    serde_json::from_str::<Value>(json)
        .is_ok_and(|v| v.get("do_remote_decode") == Some(&Value::Bool(true)))
}

/// Where vLLM's `kv_transfer_params` say a decode's cache is.
fn remote_source(json: &str) -> Option<Source> {
    let v: Value = serde_json::from_str(json).ok()?;
    if v.get("do_remote_prefill") != Some(&Value::Bool(true)) {
        return None;
    }
    Some(Source {
        host: v.get("remote_host")?.as_str()?.to_owned(),
        port: u16::try_from(v.get("remote_port")?.as_u64()?).ok()?,
        key: format!("req:{}", v.get("remote_request_id")?.as_str()?),
    })
}

/// Asks the prefill at `source` for its cache; `patient`: the prefill waits until it is
/// there (up to [`FETCH_PATIENCE`]) before it answers.
async fn fetch(source: &Source, patient: bool) -> Result<Vec<u32>, Refusal> {
    match ask(source, patient).await {
        Ok(Some(ids)) => Ok(ids),
        Ok(None) => Err(Refusal(format!(
            "no KV cache under {} at {}:{}",
            source.key, source.host, source.port
        ))),
        Err(e) => Err(Refusal(format!(
            "KV side channel {}:{}: {e}",
            source.host, source.port
        ))),
    }
}

/// One side-channel exchange: `Some(ids)`, or `None` for `MISSING`.
async fn ask(source: &Source, patient: bool) -> std::io::Result<Option<Vec<u32>>> {
    let stream = tokio::time::timeout(
        Duration::from_secs(5),
        TcpStream::connect((source.host.as_str(), source.port)),
    )
    .await
    .map_err(|_| std::io::Error::other("connect timed out"))??;
    let (read, mut write) = stream.into_split();
    let verb = if patient { "AWAIT" } else { "FETCH" };
    write
        .write_all(format!("{verb} {}\n", source.key).as_bytes())
        .await?;
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_LINE as u64));
    tokio::time::timeout(
        FETCH_PATIENCE + Duration::from_secs(5),
        reader.read_line(&mut line),
    )
    .await
    .map_err(|_| std::io::Error::other("answer timed out"))??;
    parse_answer(line.trim_end())
}

fn parse_answer(line: &str) -> std::io::Result<Option<Vec<u32>>> {
    if line == "MISSING" {
        return Ok(None);
    }
    let Some(ids) = line.strip_prefix("KV ") else {
        return Err(std::io::Error::other(format!("unexpected answer {line:?}")));
    };
    ids.split(',')
        .filter(|id| !id.is_empty())
        .map(|id| id.parse::<u32>().map_err(std::io::Error::other))
        .collect::<Result<Vec<u32>, _>>()
        .map(Some)
}

/// The prefill's side channel: one `FETCH` (answered at once) or `AWAIT` (answered once
/// the cache is kept, or `MISSING` after [`FETCH_PATIENCE`]) per connection.
async fn serve(listener: TcpListener, kept: Arc<Mutex<Kept>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let kept = kept.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = BufReader::new(read.take(1024));
            if reader.read_line(&mut line).await.is_err() {
                return;
            }
            let line = line.trim_end();
            let (key, patient) = match (line.strip_prefix("FETCH "), line.strip_prefix("AWAIT ")) {
                (Some(key), _) => (key, false),
                (None, Some(key)) => (key, true),
                (None, None) => ("", false),
            };
            let until = tokio::time::Instant::now() + FETCH_PATIENCE;
            let ids = loop {
                let taken = kept.lock().ok().and_then(|mut kept| {
                    let ids = kept.by_key.remove(key);
                    if ids.is_some() {
                        kept.order.retain(|k| k != key);
                    }
                    ids
                });
                if taken.is_some() || !patient || tokio::time::Instant::now() >= until {
                    break taken;
                }
                tokio::time::sleep(FETCH_PAUSE).await;
            };
            let answer = match ids {
                Some(ids) => {
                    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
                    format!("KV {}\n", list.join(","))
                }
                None => "MISSING\n".to_owned(),
            };
            let _ = write.write_all(answer.as_bytes()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_params_name_the_source() {
        let params = json!({"do_remote_prefill": true, "remote_host": "127.0.0.1",
            "remote_port": 7000, "remote_request_id": "cmpl-1"})
        .to_string();
        assert_eq!(
            remote_source(&params),
            Some(Source {
                host: "127.0.0.1".into(),
                port: 7000,
                key: "req:cmpl-1".into()
            })
        );
        assert_eq!(remote_source(r#"{"do_remote_prefill":false}"#), None);
        assert_eq!(remote_source("not json"), None);
        assert!(asks_remote_decode(r#"{"do_remote_decode":true}"#));
        assert!(!asks_remote_decode(r#"{"do_remote_decode":false}"#));
    }

    #[test]
    fn answers_parse() {
        assert_eq!(parse_answer("MISSING").unwrap(), None);
        assert_eq!(parse_answer("KV 1,2,3").unwrap(), Some(vec![1, 2, 3]));
        assert_eq!(parse_answer("KV ").unwrap(), Some(vec![]));
        assert!(parse_answer("KV 1,x").is_err());
        assert!(parse_answer("HELLO").is_err());
    }

    #[tokio::test]
    async fn a_decode_fetches_what_its_prefill_kept_once() {
        let prefill_flags = Flags {
            role: Role::Prefill,
            ..Flags::default()
        };
        let prefill = Disagg::start(&prefill_flags).await.unwrap();
        let decode = Disagg::start(&Flags {
            role: Role::Decode,
            ..Flags::default()
        })
        .await
        .unwrap();
        let handoff = Handoff::Bootstrap {
            host: "127.0.0.1".into(),
            port: i32::from(prefill.port),
            room: 9,
        };
        let mut request = GenerateRequest {
            request_id: "p1".into(),
            ..GenerateRequest::default()
        };
        let key = prefill.admit(&mut request, &handoff).unwrap().unwrap();
        assert_eq!(key, "room:9");
        prefill.keep(key, &[5, 6]);
        assert!(decode.receive("d1", &handoff, &[5, 7]).await.is_err());
        prefill.keep("room:9".into(), &[5, 6]);
        decode.receive("d1", &handoff, &[5, 6]).await.unwrap();
        let wrong_port = Handoff::Bootstrap {
            host: "127.0.0.1".into(),
            port: 1,
            room: 9,
        };
        assert!(prefill.admit(&mut request, &wrong_port).is_err());
        assert!(prefill.admit(&mut request, &Handoff::None).is_err());
    }
}
