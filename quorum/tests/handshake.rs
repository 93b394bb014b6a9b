//! The peer listener's admission rule, driven with raw bytes: only a configured voter other
//! than this node, addressing this node, gets a handshake back; anything else is closed before
//! any of its bytes reach the protobuf decoder.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{config, free_addr, run, Names, Node};
use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use tributary_quorum::Quorum;

/// A handshake frame, spelled out byte by byte (the wire format is the contract).
fn handshake(from: i32, to: i32) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 14, b'T', b'R', b'B', b'Q', 0, 1];
    out.extend_from_slice(&from.to_be_bytes());
    out.extend_from_slice(&to.to_be_bytes());
    out
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect_timeout(addr, Duration::from_secs(2))
        .await
        .expect("the listener accepts TCP connections")
}

/// Reads what the node answers: `None` if it closed the connection without a word.
async fn answer(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    let read = futures_lite::future::or(async { Some(stream.read(&mut buf).await) }, async {
        glommio::timer::sleep(Duration::from_secs(5)).await;
        None
    })
    .await
    .expect("the node answers or closes within 5 s");
    match read {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(buf[..n].to_vec()),
    }
}

async fn try_handshake(addr: SocketAddr, from: i32, to: i32) -> Option<Vec<u8>> {
    let mut stream = connect(addr).await;
    stream.write_all(&handshake(from, to)).await.unwrap();
    answer(&mut stream).await
}

#[test]
fn only_configured_voters_are_admitted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    run(Duration::from_secs(60), move || async move {
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let voters = [(0, free_addr()), (1, free_addr())];
        let node: Node = Quorum::open(config(0, &voters, Some(listen), &dir), Names::default())
            .await
            .unwrap();
        let addr = node.local_addr().expect("bound");
        assert_ne!(addr.port(), 0);

        assert_eq!(
            try_handshake(addr, 1, 0).await,
            Some(handshake(0, 1)),
            "a voter is answered with the node's own handshake"
        );
        assert_eq!(try_handshake(addr, 7, 0).await, None, "not a voter");
        assert_eq!(
            try_handshake(addr, 0, 0).await,
            None,
            "claims to be the node"
        );
        assert_eq!(try_handshake(addr, 1, 5).await, None, "meant another node");

        let mut bad_magic = handshake(1, 0);
        bad_magic[4] = b'X';
        let mut stream = connect(addr).await;
        stream.write_all(&bad_magic).await.unwrap();
        assert_eq!(answer(&mut stream).await, None, "bad magic");

        let mut stream = connect(addr).await;
        stream.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        assert_eq!(answer(&mut stream).await, None, "oversized first frame");

        // Admitted, then an undecodable message: the connection is closed.
        let mut stream = connect(addr).await;
        stream.write_all(&handshake(1, 0)).await.unwrap();
        assert_eq!(answer(&mut stream).await, Some(handshake(0, 1)));
        stream
            .write_all(&[0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        assert_eq!(answer(&mut stream).await, None, "undecodable message");

        node.shutdown().await;
        let refused = TcpStream::connect_timeout(addr, Duration::from_secs(2)).await;
        assert!(refused.is_err(), "the listener is closed at shutdown");
    });
}
