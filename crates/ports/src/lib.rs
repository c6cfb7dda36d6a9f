//! A free loopback port for a service started as a separate program (NATS,
//! Redis, the S3 gateway), which binds it a moment after it was chosen.
//!
//! Asking the kernel for port 0 and handing that number on is racy: the
//! port lies in the ephemeral range, and in the moment before the service
//! binds it any outgoing connection of any process (tests open hundreds)
//! may be given it as its local port, and the service then exits with
//! "address in use". Ports here come from below the ephemeral range, which
//! the kernel never hands out by itself, so only another program that
//! picks ports this way can compete for them: each process walks the range
//! from its own starting point and skips ports something is bound to.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Lowest port handed out: clear of well-known services' ports.
const FIRST: u32 = 10_000;

/// First port of the kernel's ephemeral range (Linux's default when the
/// range cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port on 127.0.0.1 nothing is bound to, outside the ephemeral range,
/// not handed out before by this process.
///
/// # Panics
/// When every port of the range is taken, or the ephemeral range leaves
/// none below it.
pub fn service_port() -> u16 {
    service_port_with(0)
}

/// A port as [`service_port`] whose companion `port + offset` is free and
/// outside the ephemeral range too (a Redis cluster node's bus port).
pub fn service_port_with(offset: u16) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let end = ephemeral_start().min(u32::from(u16::MAX) + 1) - u32::from(offset);
    assert!(
        end > FIRST + 1_000,
        "ports {FIRST}..{end} leave no room below the ephemeral range for service ports \
         (with companions {offset} above)"
    );
    let span = end - FIRST;
    // Concurrent test processes start far apart (a prime stride of pids).
    let start = std::process::id().wrapping_mul(7_919) % span;
    let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (start + n) % span).expect("below 65536");
        if free(port) && (offset == 0 || free(port + offset)) {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{end} on 127.0.0.1");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let held: Vec<(u16, TcpListener)> = (0..50)
            .map(|_| {
                let p = service_port();
                (
                    p,
                    TcpListener::bind(("127.0.0.1", p)).expect("handed out free"),
                )
            })
            .collect();
        let mut ports: Vec<u16> = held.iter().map(|(p, _)| *p).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50, "a port was handed out twice");
        let end = ephemeral_start();
        assert!(ports
            .iter()
            .all(|&p| u32::from(p) >= FIRST && u32::from(p) < end));
    }

    #[test]
    fn a_companion_port_is_free_and_below_the_ephemeral_range() {
        let p = service_port_with(10_000);
        assert!(u32::from(p) + 10_000 < ephemeral_start());
        let _main = TcpListener::bind(("127.0.0.1", p)).unwrap();
        let _bus = TcpListener::bind(("127.0.0.1", p + 10_000)).unwrap();
    }
}
