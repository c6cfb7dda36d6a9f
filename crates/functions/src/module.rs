//! The check of a user module when it is registered, without compiling it:
//! a client refuses a bad module before it is stored, with neither a
//! compiler nor a runtime linked in (the worker compiles it, sandbox.rs,
//! after the same check). See the crate docs for the ABI.

use std::borrow::Cow;
use std::collections::HashMap;

use labios_label::{Error, Result};
use wasmparser::types::EntityType;
use wasmparser::{ValType, Validator, WasmFeatures};

/// What a module may use, here and in the workers' wasmtime alike (its
/// engine is configured with exactly this set, sandbox.rs), so that a module
/// passing registration compiles: WebAssembly 3.0 (tail calls, multiple
/// memories, extended constants, relaxed SIMD, ...) without what this
/// build of wasmtime leaves out, garbage-collected types, exceptions and
/// threads (its `gc` and `threads` features are not compiled in).
pub(crate) const FEATURES: WasmFeatures = WasmFeatures::WASM3
    .difference(WasmFeatures::GC_TYPES)
    .difference(WasmFeatures::EXCEPTIONS)
    .difference(WasmFeatures::THREADS);

/// The functions a module exports, with their types.
const FUNCTIONS: [(&str, &[ValType], ValType, &str); 2] = [
    (
        "labios_alloc",
        &[ValType::I32],
        ValType::I32,
        "(i32) -> i32",
    ),
    (
        "labios_run",
        &[ValType::I32, ValType::I32, ValType::I32, ValType::I32],
        ValType::I64,
        "(i32, i32, i32, i32) -> i64",
    ),
];

/// `wasm` (binary or WAT text) as a binary module, once it is valid
/// WebAssembly that follows the module ABI.
pub fn check_module<'a>(name: &str, wasm: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    let invalid = |e: &dyn std::fmt::Display| {
        Error::InvalidArgument(format!(
            "function {name}: the module is not valid WebAssembly: {e}"
        ))
    };
    let binary = wat::parse_bytes(wasm).map_err(|e| invalid(&e))?;
    let types = Validator::new_with_features(FEATURES)
        .validate_all(&binary)
        .map_err(|e| invalid(&e))?;
    let types = types.as_ref();
    let abi = |problem: String| {
        Error::InvalidArgument(format!(
            "function {name} does not follow the LABIOS module ABI: {problem}"
        ))
    };
    if let Some((module, field, _)) = types.core_imports().into_iter().flatten().next() {
        return Err(abi(format!(
            "it imports {module}::{field}, and modules may import nothing"
        )));
    }
    let exports: HashMap<&str, EntityType> = types.core_exports().into_iter().flatten().collect();
    match exports.get("memory") {
        Some(EntityType::Memory(memory)) if !memory.memory64 => {}
        _ => return Err(abi("missing export `memory` (a 32-bit memory)".into())),
    }
    for (export, params, result, signature) in FUNCTIONS {
        match exports.get(export) {
            Some(EntityType::Func(id)) => {
                let ty = types[*id].unwrap_func();
                if ty.params() != params || ty.results() != [result] {
                    return Err(abi(format!(
                        "export `{export}` is not a function {signature}"
                    )));
                }
            }
            Some(_) => {
                return Err(abi(format!(
                    "export `{export}` is not a function {signature}"
                )))
            }
            None => {
                return Err(abi(format!(
                    "missing export `{export}` (a function {signature})"
                )))
            }
        }
    }
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"(module
        (memory (export "memory") 1)
        (func (export "labios_alloc") (param i32) (result i32) (i32.const 0))
        (func (export "labios_run") (param i32 i32 i32 i32) (result i64) (i64.const 0)))"#;

    fn refusal(wasm: &str) -> String {
        check_module("f", wasm.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn what_wasmtime_compiles_beyond_webassembly_2_passes() {
        let tail_call = GOOD.replace(
            "(param i32 i32 i32 i32) (result i64) (i64.const 0)",
            "(param i32 i32 i32 i32) (result i64) (return_call $zero))\n (func $zero (result i64) (i64.const 0)",
        );
        check_module("f", tail_call.as_bytes()).unwrap();
        let sandbox = crate::Sandbox::new(crate::SandboxLimits::default()).unwrap();
        sandbox.check("f", tail_call.as_bytes()).unwrap();
        let externref = GOOD.replace("(memory", "(global externref (ref.null extern)) (memory");
        assert!(sandbox.check("f", externref.as_bytes()).is_err());
    }

    #[test]
    fn text_and_binary_modules_pass_as_binary() {
        let binary = check_module("f", GOOD.as_bytes()).unwrap().into_owned();
        assert!(binary.starts_with(b"\0asm"));
        assert!(matches!(
            check_module("f", &binary).unwrap(),
            Cow::Borrowed(b) if b == binary.as_slice()
        ));
    }

    #[test]
    fn invalid_modules_and_abi_breaches_are_named() {
        assert!(refusal("(module (func").contains("not valid WebAssembly"));
        let bad_body = GOOD.replace("(i64.const 0)", "(i32.const 0)");
        assert!(refusal(&bad_body).contains("not valid WebAssembly"));
        let import = GOOD.replace("(memory", r#"(import "env" "log" (func)) (memory"#);
        assert!(refusal(&import).contains("imports env::log"));
        let no_memory = GOOD.replace(r#"(memory (export "memory") 1)"#, "(memory 1)");
        assert!(refusal(&no_memory).contains("missing export `memory`"));
        let memory64 = GOOD.replace(
            r#"(memory (export "memory") 1)"#,
            r#"(memory (export "memory") i64 1)"#,
        );
        assert!(refusal(&memory64).contains("missing export `memory` (a 32-bit memory)"));
        let externref = GOOD.replace("(memory", "(global externref (ref.null extern)) (memory");
        assert!(refusal(&externref).contains("not valid WebAssembly"));
        let wrong = GOOD.replace(
            "(param i32) (result i32) (i32.const 0)",
            "(param i64) (result i32) (i32.const 0)",
        );
        assert!(refusal(&wrong).contains("`labios_alloc` is not a function (i32) -> i32"));
        let missing = GOOD.replace(r#"(export "labios_run")"#, "");
        assert!(refusal(&missing).contains("missing export `labios_run`"));
    }
}
