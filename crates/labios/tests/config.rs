//! The documented example configuration is exactly the defaults, so the
//! documentation cannot drift from the code; bad values name their field.

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
