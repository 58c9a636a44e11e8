//! Command-line flags of `tollgate-load`, parsed with lexopt into [`Options`].

use std::time::Duration;

use lexopt::prelude::*;

use crate::workload::{Template, WorkloadKind};

pub const HELP: &str = "\
tollgate-load: HTTP load generator for LLM inference gateways and engines

USAGE: tollgate-load --url URL [FLAGS]

Target and protocol:
  --url URL               base URL, http:// only (default http://127.0.0.1:8000)
  --http2                 speak h2c (HTTP/2 with prior knowledge) instead of HTTP/1.1
  --header 'NAME: VALUE'  extra request header, repeatable (e.g. authorization)

Load shape:
  --connections N         TCP connections (default 16); with HTTP/1.1 also the number
                          of concurrent requests
  --concurrency N         HTTP/2 only: concurrent requests spread over the connections
                          (default: --connections)
  --rate R                open loop: start R requests/s on a fixed schedule; latency
                          counts from each request's intended start, so a stall shows up
                          in the percentiles instead of slowing the sender down. Without
                          --rate the loop is closed: each worker sends its next request
                          when the previous one ends
  --duration SECS         how long to send (default 10; decimals allowed)
  --requests N            stop after N requests (whichever of duration and N comes first)
  --threads N             client runtime threads (default 1)

Requests:
  --template NAME         chat (/v1/chat/completions, default), completions
                          (/v1/completions), generate (/generate), messages
                          (/v1/messages) or responses (/v1/responses)
  --stream                ask for server-sent events and record time to first token,
                          inter-token latency and tokens; one SSE data event carrying
                          text counts as one token
  --max-tokens N          output tokens asked for (default 16)
  --model NAME            model field (default mock-model)
  --workload NAME         fixed (default): one prompt of --prompt-bytes for every
                          request; prefix: --groups groups sharing a --prefix-bytes
                          prefix each, plus a unique suffix per request, groups in
                          random order; conversation: --conversations dialogues whose
                          prompt grows by one user and one assistant turn of
                          --turn-bytes per request, for --turns turns, then restart
  --prompt-bytes N        prompt size of the fixed workload (default 64; K, M suffixes,
                          e.g. 1M for 1 MiB prompts)
  --groups N              prefix workload: groups (default 32)
  --prefix-bytes N        prefix workload: shared prefix size (default 4096)
  --conversations N       conversation workload: dialogues (default 16)
  --turns N               conversation workload: turns per dialogue (default 8)
  --turn-bytes N          conversation workload: bytes per turn (default 256)
  --seed N                seed of prompt text and group order (default 7)

Bounds:
  --timeout SECS          whole-request timeout, head to last byte (default 60)
  --connect-timeout SECS  TCP connect and HTTP/2 handshake timeout (default 5)
  --max-body BYTES        largest response body read (default 16M); larger is an error
  --max-frame BYTES       largest SSE frame (default 1M); larger is an error

Idle connections:
  --idle N                instead of load: open N HTTP/1.1 keep-alive connections, send
                          GET /health on each, print `IDLE_READY <open>` to stderr, hold
                          them for --duration seconds, then close them and report

Output:
  --json                  one JSON object instead of the table
  -h, --help              this help
";

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub http2: bool,
    pub headers: Vec<(String, String)>,
    pub connections: usize,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub duration: Duration,
    pub requests: Option<u64>,
    pub threads: usize,
    pub template: Template,
    pub stream: bool,
    pub max_tokens: u64,
    pub model: String,
    pub workload: WorkloadKind,
    pub prompt_bytes: usize,
    pub seed: u64,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub max_body: usize,
    pub max_frame: usize,
    pub idle: Option<usize>,
    pub json: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            url: "http://127.0.0.1:8000".into(),
            http2: false,
            headers: Vec::new(),
            connections: 16,
            concurrency: 0,
            rate: None,
            duration: Duration::from_secs(10),
            requests: None,
            threads: 1,
            template: Template::Chat,
            stream: false,
            max_tokens: 16,
            model: "mock-model".into(),
            workload: WorkloadKind::Fixed,
            prompt_bytes: 64,
            seed: 7,
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            max_body: 16 << 20,
            max_frame: 1 << 20,
            idle: None,
            json: false,
        }
    }
}

/// What the command line asks for.
pub enum Command {
    Run(Box<Options>),
    Help,
}

/// Parses the process arguments.
pub fn parse() -> Result<Command, String> {
    parse_from(std::env::args_os().skip(1))
}

/// Parses `args` (without the program name).
pub fn parse_from<I>(args: I) -> Result<Command, String>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    let mut o = Options::default();
    let mut groups = 32;
    let mut prefix_bytes = 4096;
    let mut conversations = 16;
    let mut turns = 8;
    let mut turn_bytes = 256;
    let mut workload = String::from("fixed");
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Long("url") => o.url = text(&mut parser)?,
            Long("http2") => o.http2 = true,
            Long("header") => o.headers.push(header(&text(&mut parser)?)?),
            Long("connections") => o.connections = positive(&mut parser, "--connections")?,
            Long("concurrency") => o.concurrency = positive(&mut parser, "--concurrency")?,
            Long("rate") => o.rate = Some(seconds_or_rate(&mut parser, "--rate")?),
            Long("duration") => o.duration = secs(&mut parser, "--duration")?,
            Long("requests") => o.requests = Some(positive(&mut parser, "--requests")? as u64),
            Long("threads") => o.threads = positive(&mut parser, "--threads")?,
            Long("template") => o.template = Template::from_name(&text(&mut parser)?)?,
            Long("stream") => o.stream = true,
            Long("max-tokens") => o.max_tokens = positive(&mut parser, "--max-tokens")? as u64,
            Long("model") => o.model = text(&mut parser)?,
            Long("workload") => workload = text(&mut parser)?,
            Long("prompt-bytes") => o.prompt_bytes = bytes(&mut parser, "--prompt-bytes")?,
            Long("groups") => groups = positive(&mut parser, "--groups")?,
            Long("prefix-bytes") => prefix_bytes = bytes(&mut parser, "--prefix-bytes")?,
            Long("conversations") => conversations = positive(&mut parser, "--conversations")?,
            Long("turns") => turns = positive(&mut parser, "--turns")?,
            Long("turn-bytes") => turn_bytes = bytes(&mut parser, "--turn-bytes")?,
            Long("seed") => o.seed = positive(&mut parser, "--seed")? as u64,
            Long("timeout") => o.timeout = secs(&mut parser, "--timeout")?,
            Long("connect-timeout") => o.connect_timeout = secs(&mut parser, "--connect-timeout")?,
            Long("max-body") => o.max_body = bytes(&mut parser, "--max-body")?,
            Long("max-frame") => o.max_frame = bytes(&mut parser, "--max-frame")?,
            Long("idle") => o.idle = Some(positive(&mut parser, "--idle")?),
            Long("json") => o.json = true,
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    o.workload = match workload.as_str() {
        "fixed" => WorkloadKind::Fixed,
        "prefix" => WorkloadKind::Prefix {
            groups,
            prefix_bytes,
        },
        "conversation" => WorkloadKind::Conversation {
            conversations,
            turns,
            turn_bytes,
        },
        other => return Err(format!("unknown --workload '{other}'")),
    };
    if !o.http2 {
        if o.concurrency != 0 && o.concurrency != o.connections {
            return Err(
                "--concurrency needs --http2 (HTTP/1.1 runs one request per connection)".into(),
            );
        }
        o.concurrency = o.connections;
    } else if o.concurrency == 0 {
        o.concurrency = o.connections;
    }
    if !o.url.starts_with("http://") {
        return Err("--url must start with http:// (no TLS)".into());
    }
    Ok(Command::Run(Box::new(o)))
}

fn text(parser: &mut lexopt::Parser) -> Result<String, String> {
    parser
        .value()
        .map_err(|e| e.to_string())?
        .into_string()
        .map_err(|_| "flag value is not UTF-8".to_string())
}

fn positive(parser: &mut lexopt::Parser, flag: &str) -> Result<usize, String> {
    let value = text(parser)?;
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} wants a positive integer, got '{value}'")),
    }
}

fn seconds_or_rate(parser: &mut lexopt::Parser, flag: &str) -> Result<f64, String> {
    let value = text(parser)?;
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{flag} wants a positive number, got '{value}'")),
    }
}

fn secs(parser: &mut lexopt::Parser, flag: &str) -> Result<Duration, String> {
    let x = seconds_or_rate(parser, flag)?;
    Duration::try_from_secs_f64(x).map_err(|e| format!("{flag}: {e}"))
}

fn bytes(parser: &mut lexopt::Parser, flag: &str) -> Result<usize, String> {
    let value = text(parser)?;
    parse_bytes(&value)
        .ok_or_else(|| format!("{flag} wants a byte count like 4096, 64K or 1M, got '{value}'"))
}

/// `1234`, `64K`/`64KiB` (×1024) or `1M`/`1MiB` (×1024²).
fn parse_bytes(value: &str) -> Option<usize> {
    let digits = value.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let scale = match &value[digits.len()..] {
        "" => 1,
        "K" | "k" | "KiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

fn header(value: &str) -> Result<(String, String), String> {
    let (name, v) = value
        .split_once(':')
        .ok_or_else(|| format!("--header wants 'NAME: VALUE', got '{value}'"))?;
    Ok((name.trim().to_string(), v.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse_from(args.iter().copied())? {
            Command::Run(o) => Ok(*o),
            Command::Help => Err("help".into()),
        }
    }

    #[test]
    fn byte_suffixes() {
        assert_eq!(parse_bytes("1M"), Some(1 << 20));
        assert_eq!(parse_bytes("64K"), Some(64 << 10));
        assert_eq!(parse_bytes("100"), Some(100));
        assert_eq!(parse_bytes("1G"), None);
        assert_eq!(parse_bytes("x"), None);
    }

    #[test]
    fn http1_concurrency_follows_connections() {
        let o = run(&["--connections", "8"]).unwrap();
        assert_eq!(o.concurrency, 8);
        assert!(run(&["--connections", "8", "--concurrency", "64"]).is_err());
        let o = run(&["--http2", "--connections", "2", "--concurrency", "64"]).unwrap();
        assert_eq!((o.connections, o.concurrency), (2, 64));
    }

    #[test]
    fn rejects_bad_values() {
        assert!(run(&["--rate", "0"]).is_err());
        assert!(run(&["--url", "https://x"]).is_err());
        assert!(run(&["--workload", "nope"]).is_err());
        assert!(run(&["--bogus"]).is_err());
    }
}
