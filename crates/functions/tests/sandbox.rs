//! User-defined functions: WebAssembly modules in the sandbox, including
//! misbehaving ones, each followed by a good module on the same sandbox.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use labios_functions::{apply, Context, Error, Operation, Sandbox, SandboxLimits};

const UPPERCASE: &str = include_str!("../src/uppercase.wat");

const LIMITS: SandboxLimits = SandboxLimits {
    fuel: 20_000_000,
    memory_bytes: 4 << 20,
    timeout_ms: 10_000,
};

/// A module with the ABI's memory and allocator around `run`, the body of
/// `labios_run`, and `extra` fields.
fn module(run: &str, extra: &str) -> String {
    format!(
        r#"(module
            (memory (export "memory") 1)
            (global $next (mut i32) (i32.const 16))
            (func (export "labios_alloc") (param $len i32) (result i32)
              (global.get $next)
              (global.set $next (i32.add (global.get $next) (local.get $len))))
            (func (export "labios_run") (param $in i32) (param $in_len i32)
                  (param $args i32) (param $args_len i32) (result i64)
              {run})
            {extra})"#
    )
}

fn op(function: &str, args: &[(&str, &str)]) -> Operation {
    Operation {
        function: function.into(),
        args: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Runs `function` from `wasm` on `input` as application 1.
fn call(sandbox: &Sandbox, wasm: &str, input: &[u8]) -> Result<Vec<u8>, Error> {
    let modules = HashMap::from([("f".to_string(), Bytes::from(wasm.to_string()))]);
    let ctx = Context {
        app: 1,
        key: None,
        modules: &modules,
        sandbox: Some(sandbox),
    };
    apply(&[op("f", &[])], Bytes::copy_from_slice(input), &ctx).map(|b| b.to_vec())
}

fn assert_still_works(sandbox: &Sandbox) {
    assert_eq!(
        call(sandbox, UPPERCASE, b"still fine").unwrap(),
        b"STILL FINE"
    );
}

fn assert_failed(result: Result<Vec<u8>, Error>, expected: &str) {
    match result {
        Err(Error::Storage(message)) => {
            assert!(message.starts_with("function f "), "{message}");
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
        }
        other => panic!("expected a failure containing {expected:?}, got {other:?}"),
    }
}

fn assert_refused(result: Result<Vec<u8>, Error>, expected: &str) {
    match result {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains(expected), "{message:?} lacks {expected:?}")
        }
        other => panic!("expected a refusal containing {expected:?}, got {other:?}"),
    }
}

#[test]
fn a_good_module_transforms_data() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    assert_eq!(
        call(&sandbox, UPPERCASE, b"hello, labios!").unwrap(),
        b"HELLO, LABIOS!"
    );
    assert_eq!(call(&sandbox, UPPERCASE, b"").unwrap(), b"");
    // Larger than the initial page: the module grows its memory.
    let big = vec![b'x'; 300_000];
    assert_eq!(
        call(&sandbox, UPPERCASE, &big).unwrap(),
        vec![b'X'; 300_000]
    );
}

#[test]
fn arguments_arrive_as_key_value_lines() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let echo = module(
        "(i64.or (i64.shl (i64.extend_i32_u (local.get $args)) (i64.const 32))
                 (i64.extend_i32_u (local.get $args_len)))",
        "",
    );
    let modules = HashMap::from([("echo".to_string(), Bytes::from(echo))]);
    let ctx = Context {
        app: 1,
        key: None,
        modules: &modules,
        sandbox: Some(&sandbox),
    };
    let ops = [op("echo", &[("level", "3"), ("name", "a b=c")])];
    let out = apply(&ops, Bytes::from_static(b"ignored"), &ctx).unwrap();
    assert_eq!(out, "level=3\nname=a b=c\n");
}

#[test]
fn an_infinite_loop_runs_out_of_fuel() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let spin = module("(loop $l (br $l)) (unreachable)", "");
    assert_failed(
        call(&sandbox, &spin, b"x"),
        "ran out of fuel (its limit is 20000000)",
    );
    assert_still_works(&sandbox);
    // Looping in the start function, before labios_run, is caught too.
    let start = module(
        "(i64.const 0)",
        "(func $spin (loop $l (br $l))) (start $spin)",
    );
    assert_failed(call(&sandbox, &start, b"x"), "ran out of fuel");
    assert_still_works(&sandbox);
}

#[test]
fn an_infinite_loop_exceeds_its_time_limit() {
    let sandbox = Sandbox::new(SandboxLimits {
        fuel: u64::MAX,
        memory_bytes: 4 << 20,
        timeout_ms: 200,
    })
    .unwrap();
    let spin = module("(loop $l (br $l)) (unreachable)", "");
    let started = Instant::now();
    assert_failed(
        call(&sandbox, &spin, b"x"),
        "exceeded its time limit of 200 ms",
    );
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_still_works(&sandbox);
}

#[test]
fn unbounded_allocation_exceeds_the_memory_limit() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let hog = module(
        "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
         (i64.const 0)",
        "",
    );
    assert_failed(
        call(&sandbox, &hog, b"x"),
        "exceeded its memory limit of 4194304 bytes",
    );
    assert_still_works(&sandbox);
    // Declaring too much memory up front fails the same way.
    let greedy = module("(i64.const 0)", "").replace(
        r#"(memory (export "memory") 1)"#,
        r#"(memory (export "memory") 100)"#,
    );
    assert_failed(call(&sandbox, &greedy, b"x"), "exceeded its memory limit");
    // So does an input that cannot fit.
    let big = vec![b'x'; 5 << 20];
    assert_failed(call(&sandbox, UPPERCASE, &big), "exceeded its memory limit");
    assert_still_works(&sandbox);
}

#[test]
fn traps_are_reported_with_their_cause() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let unreachable = module("(unreachable)", "");
    assert_failed(
        call(&sandbox, &unreachable, b"x"),
        "trapped: wasm `unreachable` instruction executed",
    );
    assert_still_works(&sandbox);
    let divide = module(
        "(i64.extend_i32_s (i32.div_u (i32.const 1) (i32.const 0)))",
        "",
    );
    assert_failed(
        call(&sandbox, &divide, b"x"),
        "trapped: integer divide by zero",
    );
    assert_still_works(&sandbox);
    let recurse = module(
        "(call $deeper) (i64.const 0)",
        "(func $deeper (call $deeper))",
    );
    assert_failed(
        call(&sandbox, &recurse, b"x"),
        "trapped: call stack exhausted",
    );
    assert_still_works(&sandbox);
}

#[test]
fn modules_breaking_the_abi_are_refused() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let abi = "does not follow the LABIOS module ABI";
    let missing = module("(i64.const 0)", "").replace("\"labios_run\"", "\"run\"");
    assert_refused(
        call(&sandbox, &missing, b"x"),
        "missing export `labios_run` (a function (i32, i32, i32, i32) -> i64)",
    );
    assert_still_works(&sandbox);
    let wrong_type = module("(i64.const 0)", "")
        .replace("(result i64)", "(result i32)")
        .replace("(i64.const 0)", "(i32.const 0)");
    assert_refused(
        call(&sandbox, &wrong_type, b"x"),
        "export `labios_run` is not a function (i32, i32, i32, i32) -> i64",
    );
    let no_memory = module("(i64.const 0)", "").replace(r#"(export "memory")"#, "");
    assert_refused(call(&sandbox, &no_memory, b"x"), "missing export `memory`");
    let importing = module("(i64.const 0)", "").replacen(
        "(module",
        r#"(module (import "env" "clock" (func))"#,
        1,
    );
    assert_refused(
        call(&sandbox, &importing, b"x"),
        "it imports env::clock, and modules may import nothing",
    );
    assert_refused(
        call(&sandbox, "\0asm not really", b"x"),
        "the module is not valid WebAssembly",
    );
    // The same checks at registration time.
    match sandbox.check("f", missing.as_bytes()) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(abi), "{m}"),
        other => panic!("{other:?}"),
    }
    sandbox.check("f", UPPERCASE.as_bytes()).unwrap();
    assert_still_works(&sandbox);
}

#[test]
fn bad_results_fail_the_label() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let failing = module("(i64.const -3)", "");
    assert_failed(call(&sandbox, &failing, b"x"), "failed with error code -3");
    assert_still_works(&sandbox);
    // 16 bytes at 1 MiB, beyond the single 64 KiB page.
    let outside = module("(i64.const 0x0010000000000010)", "");
    assert_failed(
        call(&sandbox, &outside, b"x"),
        "labios_run returned 16 bytes at 1048576, outside its memory of 65536 bytes",
    );
    let bad_alloc = module("(i64.const 0)", "")
        .replace("(global.get $next)\n", "(i32.const -8)\n")
        .replace(
            "(global.set $next (i32.add (global.get $next) (local.get $len)))",
            "",
        );
    assert_failed(
        call(&sandbox, &bad_alloc, b"x"),
        "labios_alloc(1) returned -8",
    );
    assert_still_works(&sandbox);
}

#[test]
fn user_functions_mix_with_builtins_in_a_pipeline() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let modules = HashMap::from([(
        "shout".to_string(),
        Bytes::from_static(UPPERCASE.as_bytes()),
    )]);
    let ctx = Context {
        app: 1,
        key: None,
        modules: &modules,
        sandbox: Some(&sandbox),
    };
    let packed = apply(&[op("gzip", &[])], Bytes::from_static(b"quiet words"), &ctx).unwrap();
    let ops = [op("gunzip", &[]), op("shout", &[]), op("sha256", &[])];
    let digest = apply(&ops, packed, &ctx).unwrap();
    let expected = apply(
        &[op("sha256", &[])],
        Bytes::from_static(b"QUIET WORDS"),
        &ctx,
    );
    assert_eq!(digest, expected.unwrap());
}

#[test]
fn an_application_cannot_run_another_applications_function() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let owner_modules = HashMap::from([(
        "shout".to_string(),
        Bytes::from_static(UPPERCASE.as_bytes()),
    )]);
    let owner = Context {
        app: 1,
        key: None,
        modules: &owner_modules,
        sandbox: Some(&sandbox),
    };
    let shout = [op("shout", &[])];
    assert_eq!(
        apply(&shout, Bytes::from_static(b"mine"), &owner).unwrap(),
        "MINE"
    );
    let other_modules = HashMap::new();
    let other = Context {
        app: 2,
        modules: &other_modules,
        ..owner
    };
    match apply(&shout, Bytes::from_static(b"theirs"), &other) {
        Err(Error::InvalidArgument(m)) => assert_eq!(
            m,
            "unknown function shout (not a built-in and not registered by application 2)"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_worker_without_a_sandbox_refuses_user_functions() {
    let modules = HashMap::from([(
        "shout".to_string(),
        Bytes::from_static(UPPERCASE.as_bytes()),
    )]);
    let ctx = Context {
        app: 1,
        key: None,
        modules: &modules,
        sandbox: None,
    };
    match apply(&[op("shout", &[])], Bytes::from_static(b"x"), &ctx) {
        Err(Error::Unavailable(m)) => assert!(m.contains("function shout"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_sandbox_serves_several_threads() {
    let sandbox = Sandbox::new(LIMITS).unwrap();
    let spin = module("(loop $l (br $l)) (unreachable)", "");
    std::thread::scope(|scope| {
        for t in 0..2 {
            let (sandbox, spin) = (&sandbox, &spin);
            scope.spawn(move || {
                for i in 0..10 {
                    let input = format!("thread {t} call {i}");
                    let out = call(sandbox, UPPERCASE, input.as_bytes()).unwrap();
                    assert_eq!(out, input.to_uppercase().as_bytes());
                }
                assert_failed(call(sandbox, spin, b"x"), "ran out of fuel");
            });
        }
    });
    assert_still_works(&sandbox);
}

#[test]
fn limits_must_be_positive() {
    for limits in [
        SandboxLimits { fuel: 0, ..LIMITS },
        SandboxLimits {
            memory_bytes: 0,
            ..LIMITS
        },
        SandboxLimits {
            timeout_ms: 0,
            ..LIMITS
        },
    ] {
        assert!(matches!(
            Sandbox::new(limits),
            Err(Error::InvalidArgument(_))
        ));
    }
}
