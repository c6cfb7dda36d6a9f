//! The configuration file: TOML read into `labios::Config` the way
//! `Config::load` reads it (defaults, then the file; the environment is
//! left out so that runs do not depend on it), then `Config::validate`.
//!
//! Validation opens every declared mount, and opening an `fs://` mount
//! creates its directory: so that inputs cannot create directories all
//! over the machine, an absolute `fs://` root is pointed at one private
//! directory before validation. Everything else is validated as decoded.

use crate::engine::Target;
use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use labios::Config;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

pub static TARGET: Target = Target {
    name: "config",
    about: "labios::Config from TOML (as Config::load reads it) + Config::validate",
    run,
    seeds,
    dictionary: &[
        b"[client]",
        b"[dispatcher]",
        b"[manager]",
        b"[worker]",
        b"[[workers]]",
        b"[queue]",
        b"[warehouse]",
        b"[inventory]",
        b"[nats]",
        b"[redis]",
        b"[mounts.pfs]",
        b"[s3.buckets.b]",
        b"[faults]",
        b" = ",
        b"\"",
        b"'''",
        b"[",
        b"]",
        b"{",
        b"}",
        b"true",
        b"uri = \"s3://b/p\"",
        b"uri = \"memory://\"",
        b"mapping = \"write-optimized\"",
        b"deployment = \"distributed\"",
    ],
    max_len: 16384,
    default_inputs: 10_000_000,
    smoke_inputs: 5_000,
    cost: 1,
    hang: Duration::from_secs(2),
};

const EXAMPLE: &str = include_str!("../../../../labios.example.toml");

fn seeds() -> Vec<Vec<u8>> {
    [
        EXAMPLE,
        "deployment = \"embedded\"\ndata_dir = \"/srv/labios\"\nendpoint = \"127.0.0.1:7070\"\n",
        "[client]\nmin_label_size = 0\nmax_label_size = 4194304\nmode = \"async\"\n\
         [warehouse]\nmax_bytes = 8388608\n",
        "[dispatcher]\npolicy = \"minmax\"\nweights = \"custom\"\n\
         custom_weights = { availability = 0.2, capacity = 0.2, load = 0.2, speed = 0.2, energy = 0.2 }\n",
        "[[workers]]\ntier = \"ram\"\nspeed = 5\nenergy = 2\ncapacity = 1073741824\n\
         dir = \"/dev/shm/w0\"\nfunctions = false\n",
        "[mounts.pfs]\nuri = \"fs:///mnt/pfs\"\nmapping = \"balanced\"\nbucket_size = 524288\n\
         metadata = \"relaxed\"\ncache_bytes = 67108864\ncache_policy = \"lfu\"\n",
        "[mounts.lake]\nuri = \"s3://lake/prefix\"\nendpoint = \"http://127.0.0.1:7070\"\n\
         region = \"eu-west-1\"\naccess_key = \"k\"\nsecret_key = \"s\"\n\
         mapping = \"read-optimized\"\naggregate_bytes = 1048576\nprefetch_depth = 8\n",
        "[mounts.mem]\nuri = \"memory://\"\nmapping = \"write-optimized\"\n",
        "[s3.buckets.archive]\ndir = \"/mnt/pfs/archive\"\nowner = \"analytics\"\n\
         mapping = \"hashed-n-to-m\"\ncontainers = 16\ncompact_every_ms = 0\n",
        "deployment = \"distributed\"\n[nats]\nurl = \"tls://nats:4222\"\n\
         [redis]\nurls = [\"redis://a:6379\", \"redis://b:6379\"]\ncluster = true\n",
        "[manager]\nallocation = \"elastic\"\nmin_active = 2\n[worker]\nfunction_fuel = 1\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// The one directory `fs://` mounts may create.
fn mount_root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join("labios-fuzz-mounts");
        std::fs::create_dir_all(&root).expect("creating the fuzz mount directory");
        root
    })
}

fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let decoded = Figment::from(Serialized::defaults(Config::default()))
        .merge(Toml::string(&text))
        .extract::<Config>();
    let Ok(mut config) = decoded else {
        return;
    };
    for mount in config.mounts.values_mut() {
        if mount
            .uri
            .strip_prefix("fs://")
            .is_some_and(|dir| dir.starts_with('/'))
        {
            mount.uri = format!("fs://{}", mount_root().display());
        }
    }
    let _ = config.validate();
}
