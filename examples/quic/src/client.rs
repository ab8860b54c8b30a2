//! `ck-example-quic client`: HTTP/3 clients that hold connections open, for the tests and
//! `cargo xtask bench quic` (see the crate's description of what counts as broken).
use std::{
    collections::BTreeSet,
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{WAIT, local_socket, pid_of, read_body, tls};

/// Set on SIGTERM: every client ends as at its deadline (and the report is printed).
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the client's time is up: `deadline` passed, or SIGTERM came.
fn past(deadline: Instant) -> bool {
    STOP.load(std::sync::atomic::Ordering::Relaxed) || Instant::now() >= deadline
}

/// What the client is asked to do.
#[derive(Clone, Debug)]
struct Plan {
    addr: SocketAddr,
    connections: usize,
    interval: Duration,
    duration: Duration,
    lifetime: Duration,
    rebind: Option<Duration>,
    /// The ClientHello's ALPN list padded to this many bytes (0: `h3` alone).
    hello_bytes: usize,
}

/// What one client saw.
#[derive(Debug, Default)]
struct Outcome {
    ok: u64,
    broken: u64,
    moved: u64,
    handshakes: u64,
    pids: BTreeSet<u32>,
    errors: Vec<String>,
}

fn parse(args: &[String]) -> anyhow::Result<Plan> {
    let addr = args
        .first()
        .context("client: give the server's address (HOST:PORT)")?
        .parse()
        .context("client: the address is not HOST:PORT")?;
    let mut plan = Plan {
        addr,
        connections: 16,
        interval: Duration::from_millis(100),
        duration: Duration::from_secs(3),
        lifetime: Duration::from_secs(2),
        rebind: None,
        hello_bytes: 0,
    };
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value: u64 = rest
            .next()
            .with_context(|| format!("{flag} needs a value"))?
            .parse()
            .with_context(|| format!("{flag} takes a whole number"))?;
        let ms = Duration::from_millis(value);
        match flag.as_str() {
            "--connections" => plan.connections = value as usize,
            "--interval-ms" => plan.interval = ms,
            "--duration-ms" => plan.duration = ms,
            "--lifetime-ms" => plan.lifetime = ms,
            "--rebind-ms" => plan.rebind = Some(ms),
            "--hello-bytes" => plan.hello_bytes = value as usize,
            other => bail!("client: unknown option {other}"),
        }
    }
    Ok(plan)
}

/// Runs the clients and prints one JSON line each.
pub fn run(args: &[String]) -> anyhow::Result<()> {
    let plan = parse(args)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            sigterm.recv().await;
            STOP.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let deadline = Instant::now() + plan.duration;
        let tasks: Vec<_> = (0..plan.connections)
            .map(|i| {
                let plan = plan.clone();
                tokio::spawn(async move { (i, one_client(&plan, deadline).await) })
            })
            .collect();
        for task in tasks {
            let (i, outcome) = task.await?;
            let line = serde_json::json!({
                "client": i,
                "ok": outcome.ok,
                "broken": outcome.broken,
                "moved": outcome.moved,
                "handshakes": outcome.handshakes,
                "pids": outcome.pids,
                "errors": outcome.errors,
            });
            println!("{line}");
        }
        anyhow::Ok(())
    })
}

/// One client until `deadline`: connections one after the other.
async fn one_client(plan: &Plan, deadline: Instant) -> Outcome {
    let mut outcome = Outcome::default();
    while !past(deadline) {
        if let Err(e) = one_connection(plan, deadline, &mut outcome).await {
            outcome.broken += 1;
            if outcome.errors.len() < 5 {
                outcome.errors.push(format!("{e:#}"));
            }
            tokio::time::sleep(plan.interval).await;
        }
    }
    outcome
}

/// One connection: requests every interval until its lifetime or the deadline ends it (closed
/// by the client), or the server moves it on (GOAWAY). An error is a broken connection.
async fn one_connection(
    plan: &Plan,
    deadline: Instant,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        local_socket(plan.addr)?,
        std::sync::Arc::new(quinn::TokioRuntime),
    )?;
    endpoint.set_default_client_config(tls::client_config(plan.hello_bytes)?);
    let connection = tokio::time::timeout(WAIT, endpoint.connect(plan.addr, "localhost")?)
        .await
        .context("handshake timed out")?
        .context("handshake")?;
    outcome.handshakes += 1;
    let (mut driver, mut requests) = h3::client::new(h3_quinn::Connection::new(connection.clone()))
        .await
        .context("HTTP/3 setup")?;
    let closed =
        tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let ends = (Instant::now() + plan.lifetime).min(deadline);
    let mut rebind_at = plan.rebind.map(|every| Instant::now() + every);
    let result = loop {
        if past(ends) {
            break Ok(());
        }
        if let Some(at) = rebind_at
            && past(at)
        {
            // Client migration: the same connection from a new local port.
            endpoint.rebind(local_socket(plan.addr)?)?;
            rebind_at = plan.rebind.map(|every| Instant::now() + every);
        }
        let request = http::Request::get("https://localhost/").body(())?;
        let mut stream = match requests.send_request(request).await {
            Ok(stream) => stream,
            // GOAWAY: the server asks for a new connection; nothing was lost.
            Err(h3::error::StreamError::RemoteClosing { .. }) => {
                outcome.moved += 1;
                break Ok(());
            }
            Err(e) if e.is_h3_no_error() => {
                outcome.moved += 1;
                break Ok(());
            }
            Err(e) => break Err(anyhow::Error::from(e).context("sending a request")),
        };
        let answered = tokio::time::timeout(WAIT, async {
            stream.finish().await?;
            stream.recv_response().await?;
            read_body(&mut stream).await
        })
        .await;
        match answered {
            Ok(Ok(body)) => {
                outcome.ok += 1;
                outcome.pids.extend(pid_of(&body));
            }
            // The server closed the connection after its GOAWAY, before it took this request:
            // not processed, sent again on a new connection (as HTTP/3 clients do).
            Ok(Err(e)) if e.is_h3_no_error() => {
                outcome.moved += 1;
                break Ok(());
            }
            Ok(Err(e)) => break Err(anyhow::Error::from(e).context("a request failed")),
            Err(_) => break Err(anyhow::anyhow!("a request got no answer within {WAIT:?}")),
        }
        tokio::time::sleep(plan.interval).await;
    };
    connection.close(h3_no_error(), b"done");
    closed.abort();
    let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
    result
}

/// HTTP/3's H3_NO_ERROR, for closing a connection the client is done with.
fn h3_no_error() -> quinn::VarInt {
    quinn::VarInt::from_u32(0x100)
}
