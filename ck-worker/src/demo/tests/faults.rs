//! Tests of the demo worker's fault switches: their options, and their effect on a real
//! loopback server. Timing assertions are only lower bounds the server guarantees, or checks
//! with hundreds of milliseconds of slack.
use std::time::Instant;

use super::*;

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    demo: DemoOptions,
}

fn parse(args: &[&str]) -> Result<DemoOptions, clap::Error> {
    use clap::Parser;
    let argv = std::iter::once("ck").chain(args.iter().copied());
    Cli::try_parse_from(argv).map(|cli| cli.demo)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn options_parse_and_pair() {
    let opts = parse(&["--stall-ms", "200ms", "--stall-every", "1s"]).unwrap();
    assert_eq!(
        (opts.stall_ms, opts.stall_every),
        (Some(ms(200)), Some(ms(1000)))
    );
    let missing = clap::error::ErrorKind::MissingRequiredArgument;
    assert_eq!(parse(&["--stall-ms", "200ms"]).unwrap_err().kind(), missing);
    assert_eq!(parse(&["--stall-every", "1s"]).unwrap_err().kind(), missing);

    let opts = parse(&["--fail-health-after", "2s", "--recover-health-after", "5s"]).unwrap();
    assert_eq!(opts.fail_health_after, Some(ms(2000)));
    assert_eq!(opts.recover_health_after, Some(ms(5000)));
    assert!(parse(&["--fail-health-after", "2s"]).is_ok());
    let err = parse(&["--recover-health-after", "5s"]).unwrap_err();
    assert_eq!(err.kind(), missing);

    // A bare number is milliseconds for the `-ms` options, seconds for the others.
    assert_eq!(parse(&["--slow-ms", "250"]).unwrap().slow_ms, Some(ms(250)));
    assert_eq!(
        parse(&["--slow-ms", "1.5s"]).unwrap().slow_ms,
        Some(ms(1500))
    );
    let opts = parse(&["--stall-ms", "20", "--stall-every", "2"]).unwrap();
    assert_eq!(
        (opts.stall_ms, opts.stall_every),
        (Some(ms(20)), Some(ms(2000)))
    );
    assert!(parse(&["--slow-ms", "soon"]).is_err());
    assert!(parse(&["--fail-health-after", "x"]).is_err());
    assert_eq!(parse(&[]).unwrap(), DemoOptions::default());
}

#[test]
fn contradictory_faults_are_refused() {
    let now = tokio::time::Instant::now();
    let faults = |args: &[&str]| Faults::new(&parse(args).unwrap(), now);
    assert!(faults(&["--stall-ms", "1s", "--stall-every", "1s"]).is_err());
    assert!(faults(&["--stall-ms", "0s", "--stall-every", "0s"]).is_err());
    assert!(faults(&["--fail-health-after", "2s", "--recover-health-after", "2s"]).is_err());
    let ok = faults(&[
        "--stall-ms",
        "1ms",
        "--stall-every",
        "2ms",
        "--slow-ms",
        "3",
    ])
    .unwrap();
    assert_eq!((ok.stall, ok.slow), (Some((ms(1), ms(2))), ms(3)));
    assert_eq!(
        faults(&[]).unwrap(),
        Faults {
            started: now,
            ..Faults::default()
        }
    );
    // `run` checks them before it looks for its sockets.
    let opts = parse(&["--fail-health-after", "2s", "--recover-health-after", "1s"]).unwrap();
    let err = run(opts).unwrap_err().to_string();
    assert!(err.contains("--recover-health-after"), "{err}");
}

/// `/healthz` is 200 until `--fail-health-after`, 503 until `--recover-health-after`, then 200
/// again. Each answer must match the phase of every instant between sending and receiving it
/// (answers that straddle a switch are not checked), and both switches must be seen.
#[tokio::test]
async fn healthz_fails_then_recovers() {
    let (fail, recover) = (ms(300), ms(700));
    let started = Instant::now();
    let faults = Faults {
        started: started.into(),
        fail_health_after: Some(fail),
        recover_health_after: Some(recover),
        ..Faults::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = Server::start_with(listener, false, faults);
    let mut client = Client::connect(server.addr).await;
    let phase = |t: Duration| u8::from(t >= fail) + u8::from(t >= recover);
    let mut seen = Vec::new();
    while seen.last() != Some(&2) {
        let sent = started.elapsed();
        let response = client.get("/healthz").await;
        let answered = started.elapsed();
        let expected = match phase(sent) {
            p if p != phase(answered) => None,
            1 => Some((503, "unhealthy\n")),
            _ => Some((200, "ok\n")),
        };
        if let Some(expected) = expected {
            assert_eq!(
                (response.status, response.body.as_str()),
                expected,
                "at {sent:?}"
            );
            if seen.last() != Some(&phase(sent)) {
                seen.push(phase(sent));
            }
        }
        assert!(answered < Duration::from_secs(5), "no recovery: {seen:?}");
        tokio::time::sleep(ms(20)).await;
    }
    assert_eq!(seen.iter().filter(|&&p| p == 1).count(), 1, "{seen:?}");
    // `/` is not affected.
    assert_eq!(client.get("/").await.status, 200);
}

/// A server in a thread of its own, on its own current-thread runtime, so that its stalls
/// block it alone and not the test's client.
struct ThreadServer {
    addr: SocketAddr,
    stop: crate::close::Trigger,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

impl ThreadServer {
    fn start(faults: Faults) -> ThreadServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = crate::close::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener)?;
                serve(vec![listener], identity(), faults, stop_rx).await
            })
        });
        ThreadServer { addr, stop, thread }
    }

    async fn finished(self) {
        self.stop.trigger();
        let join = tokio::task::spawn_blocking(move || self.thread.join());
        let result = within("the server thread to end", join).await.unwrap();
        result.expect("server thread panicked").unwrap();
    }
}

/// During a stall, neither a connection already open nor a new one is answered until the
/// stall is over. A request is sent 100ms into a stall of 400ms; if the test was too late to
/// do that (a loaded machine), it tries again at the next stall.
#[tokio::test]
async fn stall_blocks_answers_until_it_ends() {
    let (stall, every) = (ms(400), ms(800));
    let started = Instant::now();
    let faults = Faults {
        started: started.into(),
        stall: Some((stall, every)),
        ..Faults::default()
    };
    let server = ThreadServer::start(faults);
    let mut open = Client::connect(server.addr).await;
    assert_eq!(open.get("/").await.status, 200);
    let mut tested = false;
    for n in 1..=4 {
        let stall_start = started + every * n;
        tokio::time::sleep_until((stall_start + ms(100)).into()).await;
        let sent = Instant::now();
        if sent > stall_start + ms(200) {
            continue;
        }
        // The kernel completes the handshake; the stalled worker accepts it only later.
        let mut new = Client::connect(server.addr).await;
        new.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
        open.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").await;
        assert_eq!(open.response(false).await.body, "ok\n");
        assert_eq!(new.response(false).await.body, "slot=7 pid=1234\n");
        let waited = sent.elapsed();
        assert!(
            waited >= ms(150),
            "answered {waited:?} after sending, during a stall"
        );
        tested = true;
        break;
    }
    assert!(tested, "never managed to send during a stall");
    server.finished().await;
}

/// With `--slow-ms`, `/` is answered after the delay, while another connection is served
/// meanwhile; `/healthz` is not delayed.
#[tokio::test]
async fn slow_delays_root_without_blocking_others() {
    let slow = ms(600);
    let faults = Faults {
        slow,
        ..Faults::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = Server::start_with(listener, false, faults);
    let mut slowed = Client::connect(server.addr).await;
    let mut other = Client::connect(server.addr).await;
    let sent = Instant::now();
    slowed.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(other.get("/healthz").await.status, 200);
    let mut byte = [0; 1];
    let pending = slowed.stream.try_read(&mut byte);
    assert!(
        matches!(&pending, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "/ answered before /healthz on another connection: {pending:?} after {:?}",
        sent.elapsed()
    );
    let response = slowed.response(false).await;
    let waited = sent.elapsed();
    assert_eq!(response.body, "slot=7 pid=1234\n");
    assert!(waited >= ms(500), "answered after {waited:?}");
    // The next request on the connection is delayed too.
    let sent = Instant::now();
    assert_eq!(slowed.get("/?again").await.status, 200);
    assert!(sent.elapsed() >= ms(500));
    server.stop.trigger();
    server.finished().await;
}

/// `--capacity 100 --warm-up 10s`: the first request is answered at once; one arriving with
/// it waits its turn, 100 ms later at the start (a little less: the turn falls 100 ms into
/// the warm-up), 10 ms once warm.
#[test]
fn a_warming_capacity_serves_a_tenth_at_first_and_queues_the_rest() {
    let now = tokio::time::Instant::now();
    let cold = Faults {
        capacity: Some(100),
        warm_up: Duration::from_secs(10),
        started: now,
        ..Faults::default()
    };
    let pacer = super::super::faults::Pacer::new(&cold).expect("a pacer");
    let (a, b) = (pacer.done_at(), pacer.done_at());
    assert!(
        a <= tokio::time::Instant::now(),
        "the first is answered at once"
    );
    let gap = b - a;
    assert!(
        gap >= Duration::from_millis(85) && gap <= Duration::from_millis(101),
        "{gap:?}"
    );
    let warm = Faults {
        started: now - Duration::from_secs(20),
        ..cold
    };
    let pacer = super::super::faults::Pacer::new(&warm).expect("a pacer");
    let (a, b) = (pacer.done_at(), pacer.done_at());
    assert_eq!(b - a, Duration::from_millis(10));
    assert!(super::super::faults::Pacer::new(&Faults::default()).is_none());
}
