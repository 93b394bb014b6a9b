//! A port belongs to one broker process: two `tributary` processes started at the same moment
//! on one client port, or one metrics port, never both listen — one serves, the other exits at
//! start-up saying the address is in use and which key to change. Each shard binds its own
//! SO_REUSEPORT socket, which the kernel would let a second process of the same user share.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::ApiKey;

use common::cluster::free_addr;
use common::{BrokerProcess, RawConn};

/// Rounds of each race; the old probe-then-bind start-up let both brokers listen in every one.
const ROUNDS: usize = 10;
/// How long one round may take: both brokers start, one serves and the other has exited.
const ROUND_DEADLINE: Duration = Duration::from_secs(30);

/// One broker process, killed when dropped; its stdout and stderr go to `log`.
struct Broker {
    child: BrokerProcess,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn spawn(client: SocketAddr, metrics: SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("broker.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tributary"))
            .arg("--listen")
            .arg(client.to_string())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--cores", "1", "--set"])
            .arg(format!("metrics.listen={metrics}"))
            .env("NO_COLOR", "1")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("broker binary starts");
        Self {
            child: BrokerProcess(child),
            log,
            _dir: dir,
        }
    }

    fn output(&self) -> String {
        read(&self.log)
    }

    fn listening(&self) -> bool {
        self.output().contains("tributary is listening")
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.0.try_wait().expect("waiting on a broker")
    }
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Starts two brokers at once, on `(client, metrics)` addresses each; waits until one serves
/// and the other has exited, and returns (the one serving, the one that exited, its status).
fn race(
    round: usize,
    a: (SocketAddr, SocketAddr),
    b: (SocketAddr, SocketAddr),
) -> (Broker, Broker, ExitStatus) {
    let mut brokers = [Broker::spawn(a.0, a.1), Broker::spawn(b.0, b.1)];
    let deadline = Instant::now() + ROUND_DEADLINE;
    loop {
        let exited: Vec<Option<ExitStatus>> = brokers.iter_mut().map(Broker::exited).collect();
        let listening: Vec<bool> = brokers.iter().map(Broker::listening).collect();
        assert!(
            !(listening[0] && listening[1] && exited.iter().all(Option::is_none)),
            "round {round}: both brokers listen; their logs:\n--- first ---\n{}\n--- second ---\n{}",
            brokers[0].output(),
            brokers[1].output()
        );
        assert!(
            exited.iter().any(Option::is_none),
            "round {round}: both brokers exited; their logs:\n--- first ---\n{}\n--- second ---\n{}",
            brokers[0].output(),
            brokers[1].output()
        );
        let done = (0..2).find(|&i| listening[i] && exited[1 - i].is_some());
        if let Some(i) = done {
            let status = exited[1 - i].unwrap();
            let [first, second] = brokers;
            return match i {
                0 => (first, second, status),
                _ => (second, first, status),
            };
        }
        assert!(
            Instant::now() < deadline,
            "round {round}: no broker serves with the other gone within {ROUND_DEADLINE:?}; their logs:\n--- first ---\n{}\n--- second ---\n{}",
            brokers[0].output(),
            brokers[1].output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The loser exited non-zero saying the address is in use, naming the port and the key.
fn check_refused(loser: &Broker, status: ExitStatus, port: u16, key: &str) {
    let out = loser.output();
    assert!(!status.success(), "the second broker exited 0: {out}");
    assert!(out.contains("address in use"), "{out}");
    assert!(out.contains(&port.to_string()), "names port {port}: {out}");
    assert!(out.contains(key), "names {key}: {out}");
}

#[test]
fn two_brokers_started_together_on_one_client_port_never_both_listen() {
    for round in 0..ROUNDS {
        let client = free_addr();
        let (winner, loser, status) = race(round, (client, free_addr()), (client, free_addr()));
        check_refused(&loser, status, client.port(), "--listen");
        // The winner serves the port, and still runs.
        let resp: ApiVersionsResponse = RawConn::connect(client).request(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default(),
        );
        assert_eq!(resp.error_code, 0, "round {round}");
        let mut winner = winner;
        assert!(
            winner.exited().is_none(),
            "round {round}: the winner exited"
        );
    }
}

#[test]
fn two_brokers_started_together_on_one_metrics_port_never_both_listen() {
    use std::io::{Read, Write};
    for round in 0..ROUNDS {
        let metrics = free_addr();
        let (winner, loser, status) = race(round, (free_addr(), metrics), (free_addr(), metrics));
        check_refused(&loser, status, metrics.port(), "metrics.listen");
        let mut s = std::net::TcpStream::connect(metrics).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /health HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "round {round}: {answer}"
        );
        let mut winner = winner;
        assert!(
            winner.exited().is_none(),
            "round {round}: the winner exited"
        );
    }
}
