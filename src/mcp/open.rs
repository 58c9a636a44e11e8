//! Opening a request's servers: every one connected and its tools listed at once, by one
//! deadline, so a slow server costs its own time and not the sum of all. Both MCP tool
//! loops open their servers here (Messages' on a provider backend, Responses'), and the
//! session settings they hand over are built by each from its own request shape.

use std::time::Instant;

use tokio::task::JoinSet;

use super::{McpError, McpHttp, Session, SessionSettings, Tool};

/// A server connected, with the tools it lists.
pub type Opened = (Session, Vec<Tool>);

/// The tasks opening servers, each answering with its server's index.
type Openings = JoinSet<(usize, Result<Opened, McpError>)>;

/// Opens every server of `servers` at once, by `deadline`, and waits for all: the
/// outcomes in the order of `servers` (for a caller that serves with those that opened).
pub async fn open_each(
    http: &McpHttp,
    servers: impl IntoIterator<Item = SessionSettings>,
    deadline: Instant,
) -> Vec<Result<Opened, McpError>> {
    let (mut tasks, count) = spawn_all(http, servers, deadline);
    let mut outcomes: Vec<Result<Opened, McpError>> =
        (0..count).map(|_| Err(McpError::Timeout)).collect();
    while let Some(joined) = tasks.join_next().await {
        if let Ok((index, outcome)) = joined {
            outcomes[index] = outcome;
        }
    }
    outcomes
}

/// Opens every server of `servers` at once, by `deadline`: all of them in the order of
/// `servers`, or the index and error of the first to fail, the others dropped at once (for
/// a caller that fails the request when any server cannot be used).
pub async fn open_every(
    http: &McpHttp,
    servers: impl IntoIterator<Item = SessionSettings>,
    deadline: Instant,
) -> Result<Vec<Opened>, (usize, McpError)> {
    let (mut tasks, count) = spawn_all(http, servers, deadline);
    let mut opened: Vec<Option<Opened>> = (0..count).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Ok(open))) => opened[index] = Some(open),
            Ok((index, Err(err))) => return Err((index, err)),
            // A task that panicked leaves its slot empty: reported below.
            Err(_) => {}
        }
    }
    opened
        .into_iter()
        .enumerate()
        .map(|(index, open)| open.ok_or((index, McpError::Timeout)))
        .collect()
}

/// One task per server, each connecting and listing by `deadline`; and how many.
fn spawn_all(
    http: &McpHttp,
    servers: impl IntoIterator<Item = SessionSettings>,
    deadline: Instant,
) -> (Openings, usize) {
    let mut tasks = JoinSet::new();
    let mut count = 0;
    for (index, settings) in servers.into_iter().enumerate() {
        count += 1;
        let http = http.clone();
        tasks.spawn(async move {
            let open = async {
                let mut session = Session::connect(http, &settings).await?;
                let tools = session.list_tools().await?;
                Ok((session, tools))
            };
            let outcome = tokio::time::timeout_at(deadline.into(), open)
                .await
                .unwrap_or(Err(McpError::Timeout));
            (index, outcome)
        });
    }
    (tasks, count)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::mcp::{client, CallLimits};

    fn refused(url: &str) -> SessionSettings {
        SessionSettings {
            url: url.to_owned(),
            bearer: None,
            headers: http::HeaderMap::new(),
            limits: CallLimits::starting_now(Duration::from_secs(2), Duration::from_secs(5), true),
        }
    }

    /// A port nothing listens on: bound, then closed.
    fn closed_port() -> u16 {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn each_outcome_stands_in_its_servers_place() {
        let http = client(&crate::http::tls::UpstreamTls::platform());
        let url = format!("http://127.0.0.1:{}/mcp", closed_port());
        let deadline = Instant::now() + Duration::from_secs(5);
        let each = open_each(&http, [refused(&url), refused("ftp://nowhere")], deadline).await;
        assert_eq!(each.len(), 2);
        assert!(
            matches!(each[0], Err(McpError::Unreachable(_))),
            "{:?}",
            each[0].as_ref().err()
        );
        assert!(
            matches!(each[1], Err(McpError::BadUrl(_))),
            "{:?}",
            each[1].as_ref().err()
        );
        let started = Instant::now();
        let every = open_every(&http, [refused("ftp://nowhere")], deadline).await;
        assert!(matches!(every, Err((0, McpError::BadUrl(_)))));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(open_every(&http, [], deadline).await.unwrap().is_empty());
    }
}
