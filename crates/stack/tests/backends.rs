//! Every backend of the registry through the conformance suite, and the
//! registry's refusals.

use labios_stack::backends::memory::MemoryBackend;
use labios_stack::conformance::{backend_suite, every_backend, restart_suite};
use labios_stack::{Backend, Spec};

#[test]
fn every_backend_passes_the_suite_and_restarts_as_it_says() {
    let specs = every_backend();
    assert!(specs.len() >= 2, "{specs:?}");
    for spec in specs {
        let dir = tempfile::tempdir().unwrap();
        backend_suite(spec.build(dir.path(), 1 << 30).unwrap().as_ref());
        let dir = tempfile::tempdir().unwrap();
        restart_suite(&spec, dir.path());
    }
}

#[test]
fn a_malformed_stack_is_refused_naming_the_module() {
    let spec =
        |names: &[&str]| Spec::try_from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>());
    assert_eq!(spec(&["memory"]).unwrap().to_string(), "memory");
    for (names, named) in [
        (&[][..], "empty"),
        (&["ssd"][..], "\"ssd\""),
        (&["zstd", "file"][..], "\"zstd\""),
    ] {
        let err = spec(names).unwrap_err().to_string();
        assert!(err.contains(named), "{names:?}: {err}");
    }
}

#[test]
fn the_memory_backend_stays_within_its_capacity() {
    let m = MemoryBackend::new(8192);
    m.write(1, &[(0, &[1; 4096])], false).unwrap();
    let err = m.write(1, &[(4096, &[2; 4097])], false).unwrap_err();
    assert!(err.to_string().contains("full"), "{err}");
    let mut back = [0u8; 4096];
    m.read(1, 0, &mut back).unwrap();
    assert_eq!(back, [1; 4096], "a refused write changes nothing");
    m.write(1, &[(4096, &[2; 4096])], false).unwrap();
    assert_eq!(m.used(), 8192);
}
