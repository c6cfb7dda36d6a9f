//! The documented example configuration is exactly the defaults, so the
//! documentation cannot drift from the code; bad values name their field;
//! the client libraries' view of the file (`labios_connect::Settings`)
//! reads what the command reads.

use labios::Config;
use std::path::Path;

fn example() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../labios.example.toml"
    ))
}

#[test]
fn example_file_documents_the_defaults() {
    let loaded = Config::load(Some(example())).unwrap();
    assert_eq!(loaded, Config::default());
}

#[test]
fn bad_values_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    for (text, field) in [
        ("[client]\nmax_label_size = 0\n", "max_label_size"),
        ("[client]\nmin_label_size = 5000000\n", "min_label_size"),
        (
            "[[workers]]\ntier = \"x\"\nspeed = 9\nenergy = 1\ncapacity = 10\n",
            "workers[0].speed",
        ),
        (
            "[[workers]]\ntier = \"x\"\nspeed = 1\nenergy = 1\ncapacity = 10\nstack = [\"snappy\", \"file\"]\n",
            "unknown layer \"snappy\"",
        ),
        (
            "[[workers]]\ntier = \"x\"\nspeed = 1\nenergy = 1\ncapacity = 10\nstack = [\"ssd\"]\n",
            "unknown backend \"ssd\"",
        ),
        ("[dispatcher]\npolicy = \"fastest\"\n", "policy"),
        ("[dispatcher]\nweights = \"custom\"\n", "custom_weights"),
        ("[manager]\nallocation = \"lazy\"\n", "allocation"),
        ("dispatchers = 0\n", "dispatchers"),
        ("data_dir = 5\n", "data_dir"),
        (
            "[warehouse]\nmax_bytes = 1048576\n",
            "`warehouse.max_bytes` (1048576) leaves 917504 bytes",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = format!("{:#}", Config::load(Some(&file)).unwrap_err());
        assert!(err.contains(field), "{text:?} gave {err}");
    }
    let missing = format!(
        "{:#}",
        Config::load(Some(&dir.path().join("nope.toml"))).unwrap_err()
    );
    assert!(missing.contains("not found"), "{missing}");
}

/// The C, preload and Python libraries read the file through the client's
/// view (`labios_connect::Settings`), so that they link no server: it must
/// know every section the command knows, or a client would refuse a file
/// `labios serve` accepts.
#[test]
fn clients_know_every_section_of_the_configuration() {
    let every = serde_json::to_value(Config::default()).unwrap();
    let view: labios_connect::Settings = serde_json::from_value(every).unwrap();
    assert_eq!(view, Config::default().connection());
}

#[test]
fn a_client_reads_the_connection_the_command_reads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        r#"deployment = "distributed"
data_dir = "/srv/labios"
endpoint = "node7:7070"
dispatchers = 2
[client]
min_label_size = 0
[dispatcher]
policy = "random"
[[workers]]
tier = "ssd"
speed = 3
energy = 3
capacity = 1073741824
[nats]
url = "nats://nats.example:4333"
stream = "LAB"
[redis]
urls = ["redis://redis.example:6380"]
[faults]
seed = 7
error_ppm = 10
[mounts.lake]
uri = "fs:///srv/lake"
[s3.buckets.raw]
dir = "/srv/raw"
owner = "default"
"#,
    )
    .unwrap();
    let command = Config::load(Some(&file)).unwrap();
    let client = labios_connect::Settings::load(Some(&file)).unwrap();
    // Every field a client reads differs from its default here, so a field
    // `Config::connection` forgot to copy would show.
    let default = labios_connect::Settings::default();
    assert_ne!(client.deployment, default.deployment);
    assert_ne!(client.data_dir, default.data_dir);
    assert_ne!(client.endpoint, default.endpoint);
    assert_ne!(client.client, default.client);
    assert_ne!(client.nats, default.nats);
    assert_ne!(client.redis, default.redis);
    assert_ne!(client.mounts, default.mounts);
    assert_ne!(client.faults, default.faults);
    assert_eq!(client, command.connection());
    assert_eq!(client.endpoint(), "node7:7070");
    assert_eq!(client.client.min_label_size, 0);
    assert_eq!(client.mounts.len(), 1);
    let example = labios_connect::Settings::load(Some(example())).unwrap();
    assert_eq!(example, Config::default().connection());
}

#[test]
fn a_client_refuses_what_the_command_refuses_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    for (text, name) in [
        ("[dispatchr]\npolicy = \"random\"\n", "dispatchr"),
        ("endpiont = \"node7:7070\"\n", "endpiont"),
        ("[client]\nmode = \"sometimes\"\n", "mode"),
        ("[client]\nmax_label_size = 0\n", "max_label_size"),
        ("[redis]\nnode_local = true\n", "node_local"),
        ("[mounts.bad]\nuri = \"ftp://x\"\n", "bad"),
        ("[faults]\nseed = 1\nerror_ppm = 2000000\n", "faults"),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = format!(
            "{:#}",
            labios_connect::Settings::load(Some(&file)).unwrap_err()
        );
        assert!(err.contains(name), "{text:?} gave {err}");
        let err = format!("{:#}", Config::load(Some(&file)).unwrap_err());
        assert!(err.contains(name), "{text:?} gave {err}");
    }
}
