//! Uploaded WebAssembly modules (binary or text), as the client checks
//! them at registration (`check_module`: validation and the module ABI,
//! without compiling), as a worker compiles them (`Sandbox::check`), which
//! must agree with the client's check, and, when they pass, as a worker
//! runs them on a label's data (`apply`) under the worker's default
//! limits. Compiling with Cranelift takes milliseconds per valid module,
//! so this target runs far fewer inputs.

use crate::engine::Target;
use bytes::Bytes;
use labios_functions::{apply, Context, Operation, Sandbox, SandboxLimits};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

pub static TARGET: Target = Target {
    name: "wasm",
    about: "user modules: check_module, Sandbox::check (which must agree), then apply under the worker's limits",
    run,
    seeds,
    dictionary: &[
        b"(module",
        b"(memory (export \"memory\") 1)",
        b"(func",
        b"(export \"labios_run\")",
        b"(export \"labios_alloc\")",
        b"(param i32)",
        b"(result i64)",
        b"i32.const",
        b"memory.grow",
        b"(import \"env\" \"f\" (func))",
        b"\0asm\x01\0\0\0",
        b")",
    ],
    max_len: 4096,
    default_inputs: 1_000_000,
    smoke_inputs: 1_000,
    cost: 10,
    // A running module is stopped after the worker's 10 s function
    // timeout; compiling comes on top.
    hang: Duration::from_secs(20),
};

const UPPERCASE: &str = include_str!("../../../functions/src/uppercase.wat");

/// The ABI around `run`, the body of `labios_run`, and `extra` fields.
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

fn seeds() -> Vec<Vec<u8>> {
    let texts = [
        UPPERCASE.to_string(),
        module("(i64.const 0)", ""),
        module("(i64.const -3)", ""),
        module(
            "(i64.or (i64.shl (i64.extend_i32_u (local.get $args)) (i64.const 32)) \
             (i64.extend_i32_u (local.get $args_len)))",
            "",
        ),
        module(
            "(drop (memory.grow (i32.const 2))) (i64.const 16)",
            r#"(data (i32.const 16) "labios") (table 4 funcref)"#,
        ),
        module(
            "(call $sum (local.get $in) (local.get $in_len))",
            "(func $sum (param i32 i32) (result i64) (i64.extend_i32_u (i32.add (local.get 0) (local.get 1))))",
        ),
        module("(i64.const 0)", r#"(import "env" "clock" (func))"#),
    ];
    let mut seeds: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
    seeds.extend(texts.iter().filter_map(|t| wat::parse_str(t).ok()));
    seeds
}

/// The worker's sandbox, with the limits of its default configuration.
pub(super) fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let worker = labios::Config::default().worker_settings();
        Sandbox::new(SandboxLimits {
            fuel: worker.function_fuel,
            memory_bytes: usize::try_from(worker.function_memory_bytes).unwrap_or(usize::MAX),
            timeout_ms: worker.function_timeout_ms,
        })
        .expect("starting the sandbox")
    })
}

fn run(data: &[u8]) {
    let sandbox = sandbox();
    let registered = labios_functions::check_module("fuzz", data).is_ok();
    let compiled = sandbox.check("fuzz", data).is_ok();
    assert_eq!(
        registered, compiled,
        "registration and the worker disagree on a module (registration accepts: {registered})"
    );
    if !compiled {
        return;
    }
    let modules = HashMap::from([("fuzz".to_string(), Bytes::copy_from_slice(data))]);
    let ctx = Context {
        app: 3,
        key: None,
        modules: &modules,
        sandbox: Some(sandbox),
    };
    let op = Operation {
        function: "fuzz".into(),
        args: vec![("mode".into(), "fast".into())],
    };
    let _ = apply(&[op], Bytes::from_static(b"hello, labios"), &ctx);
}
