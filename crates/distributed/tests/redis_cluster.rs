//! RedisWarehouse and RedisInventory on a real three-node Redis Cluster
//! (`redis-server --cluster-enabled yes` x3 + `redis-cli --cluster create`).

use labios_distributed::redis_store::{RedisConfig, RedisInventory, RedisWarehouse};
use labios_store::conformance;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Cluster {
    nodes: Vec<Child>,
    ports: Vec<u16>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.nodes {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start_cluster() -> Cluster {
    let mut c = Cluster {
        nodes: Vec::new(),
        ports: Vec::new(),
        _dirs: Vec::new(),
    };
    for _ in 0..3 {
        let port = labios_ports::service_port_with(10_000);
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .args([
                "--cluster-enabled",
                "yes",
                "--appendonly",
                "yes",
                "--save",
                "",
            ]);
        let log = dir.path().join("redis-server.log");
        let child = labios_ports::start_service_on("redis-server", &log, port, &mut command)
            .unwrap_or_else(|e| panic!("{e}"));
        c.nodes.push(child);
        c.ports.push(port);
        c._dirs.push(dir);
    }
    for p in &c.ports {
        labios_ports::await_redis(*p).unwrap_or_else(|e| panic!("{e}"));
    }
    let addrs: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli (bash scripts/services.sh install)");
    assert!(
        out.status.success(),
        "cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Until every node agrees the cluster is ok.
    let t = Instant::now();
    for p in &c.ports {
        loop {
            let o = Command::new("redis-cli")
                .args(["-p", &p.to_string(), "CLUSTER", "INFO"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok") {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "cluster not ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_conformance() {
    let c = start_cluster();
    let cfg = RedisConfig {
        urls: c
            .ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect(),
        cluster: true,
        namespace: format!("cl{}", fastrand::u32(..)),
        reclaim_after_ms: 4_000,
        ..RedisConfig::default()
    };
    let w = RedisWarehouse::connect(&cfg).await.unwrap();
    conformance::warehouse_suite(Arc::new(w)).await;
    let bp = RedisConfig {
        max_bytes: 1000,
        put_timeout_ms: 300,
        namespace: format!("{}bp", cfg.namespace),
        ..cfg.clone()
    };
    let w = RedisWarehouse::connect(&bp).await.unwrap();
    conformance::warehouse_backpressure_suite(Arc::new(w), 1000, Duration::from_millis(300)).await;
    let i = Arc::new(RedisInventory::connect(&cfg).await.unwrap());
    conformance::inventory_suite(i.clone()).await;
    conformance::inventory_reclaim_suite(i, Duration::from_millis(4_000)).await;
    println!(
        "cluster of 3 masters on ports {:?}: conformance ok",
        c.ports
    );
}
