//! What the tools' tests share: a one-shard broker started in the test process, running the
//! `trib` binary with a deadline, a test PKI made with rcgen, and `--command-config` files.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tributary_broker::config::{BrokerConfig, ConfigInput};
use tributary_broker::server::{self, BrokerHandle};

/// How long one `trib` run may take before the test gives up on it.
pub const TRIB_DEADLINE: Duration = Duration::from_secs(60);

/// A one-shard broker with its data in `data`, its listeners and metrics endpoint on ephemeral
/// ports, and `props`.
pub fn start_broker(data: &Path, props: &[(&str, &str)]) -> BrokerHandle {
    let mut properties = vec![("metrics.listen".to_string(), "127.0.0.1:0".to_string())];
    properties.extend(props.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = BrokerConfig::build(ConfigInput {
        data_dir: data.to_path_buf(),
        listen: "127.0.0.1:0".into(),
        advertised_listener: None,
        cores: Some(1),
        cpus: None,
        numa_node: None,
        properties,
    })
    .expect("broker config");
    server::start(config).expect("broker starts")
}

/// Where `b` serves listener `name`.
pub fn listener(b: &BrokerHandle, name: &str) -> SocketAddr {
    b.listeners
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("listener {name}"))
        .1
}

/// Runs `trib` with `args` to completion within `TRIB_DEADLINE`: (success, stdout, stderr).
pub fn trib(args: &[&str]) -> (bool, String, String) {
    trib_with_input(args, None)
}

/// As [`trib`], writing `input` to its stdin (then closing it); no input: stdin is empty.
pub fn trib_with_input(args: &[&str], input: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trib"))
        .args(args)
        .env_remove("TRIB_BOOTSTRAP")
        .env_remove("TRIB_COMMAND_CONFIG")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("trib starts");
    if let Some(text) = input {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        // Dropped here: trib sees the end of its input.
    }
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > TRIB_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "trib {args:?} still running after {TRIB_DEADLINE:?}; stderr: {}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.success(), out.join().unwrap(), err.join().unwrap())
}

/// CA, broker and client PEM files: the broker's certificate names 127.0.0.1 only.
pub struct Pki {
    pub ca: PathBuf,
    pub broker: PathBuf,
    /// The client's certificate chain and key in one file (`ssl.keystore.location`).
    pub client: PathBuf,
}

pub fn pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "trib test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let signed = |names: &[&str], cn: &str, usage| {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        format!("{}{}", cert.pem(), key.serialize_pem())
    };
    let write = |name: &str, pem: &str| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", &ca.pem()),
        broker: write(
            "broker.pem",
            &signed(
                &["127.0.0.1"],
                "broker",
                ExtendedKeyUsagePurpose::ServerAuth,
            ),
        ),
        client: write(
            "client.pem",
            &signed(&[], "carol", ExtendedKeyUsagePurpose::ClientAuth),
        ),
    }
}

pub fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Writes a `--command-config` file.
pub fn command_config(dir: &Path, name: &str, lines: &[String]) -> String {
    let file = dir.join(name);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    path(&file)
}
